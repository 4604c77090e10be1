//! `envrt lease ingress LEASE --port P --path /x`: Paperclip's runner WebSocket ingress
//! (capability `runnerWebSocketIngress`, contract section 10) on the command line. Asks
//! the lease's driver for the endpoint, prints it, and keeps it open (the sandbox's endpoint
//! lives in the worker this invocation started) until the lease ends or this invocation
//! is interrupted.
//!
//! Printed on stdout: the `ws://` URL, `generation G`, and one `header NAME` line per
//! secret header. The header values are secrets: they are printed (`header NAME: VALUE`)
//! only with `--show-secrets`, and never on stderr nor in a log; without it stderr says
//! how to get them.

use clap::Args;

use crate::app::App;
use crate::error::CliError;

#[derive(Debug, Args)]
pub(crate) struct IngressArgs {
    /// The lease id.
    #[arg(value_name = "LEASE")]
    lease: String,
    /// The port on the lease's loopback that the upgrades reach.
    #[arg(long, value_name = "PORT")]
    port: u16,
    /// The HTTP path the endpoint serves (starts with "/").
    #[arg(long, value_name = "PATH")]
    path: String,
    /// Print the secret header values (otherwise only their names).
    #[arg(long)]
    show_secrets: bool,
}

/// What is printed on stdout for `endpoint`.
fn printed(endpoint: &envrt::core::RunnerIngressEndpoint, show_secrets: bool) -> String {
    let mut out = format!("{}\ngeneration {}\n", endpoint.websocket_url, endpoint.generation);
    for header in &endpoint.secret_headers {
        if show_secrets {
            out.push_str(&format!("header {}: {}\n", header.name, header.value.expose()));
        } else {
            out.push_str(&format!("header {}\n", header.name));
        }
    }
    out
}

pub(crate) async fn run(app: &App, args: IngressArgs) -> Result<u8, CliError> {
    let endpoint = app.runtime.runner_ingress(&args.lease, args.port, &args.path).await?;
    // Said before the endpoint is printed: whoever reads it has the note too.
    if !args.show_secrets {
        crate::say!("envrt: the secret header values are not printed; pass --show-secrets to print them");
    }
    crate::out!("{}", printed(&endpoint, args.show_secrets).trim_end());
    crate::expose::hold_until_the_lease_ends(app, &args.lease, "its runner ingress endpoint is closed").await?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envrt::core::Secret;
    use envrt::core::driver::IngressHeader;

    #[test]
    fn the_secret_values_are_printed_only_when_asked() {
        let endpoint = envrt::core::RunnerIngressEndpoint {
            websocket_url: "ws://127.0.0.1:4000/runner".into(),
            secret_headers: vec![IngressHeader {
                name: "x-envrt-ingress-token".into(),
                value: Secret::new("s3cret"),
            }],
            generation: "g:1".into(),
        };
        assert_eq!(
            printed(&endpoint, false),
            "ws://127.0.0.1:4000/runner\ngeneration g:1\nheader x-envrt-ingress-token\n"
        );
        assert_eq!(
            printed(&endpoint, true),
            "ws://127.0.0.1:4000/runner\ngeneration g:1\nheader x-envrt-ingress-token: s3cret\n"
        );
    }
}
