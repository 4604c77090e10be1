//! The local backend: processes on this host. A command's process group and cgroup
//! (`containment`, `groups`), the descriptors it inherits (`fds`), the file it runs
//! (`program`), the user it runs as (`user`), and the reading of bulk output (`bulk`).

pub(crate) mod bulk;
pub(crate) mod containment;
pub(crate) mod fds;
pub(crate) mod groups;
pub(crate) mod program;
pub(crate) mod user;

/// How a local driver with [`LocalConfig::cgroups`](crate::LocalConfig::cgroups) = `cgroups` would contain its
/// commands on this machine: `cgroup v2 under PATH`, or `process groups and a /proc scan
/// on release` (for `envrt caps` / `envrt doctor`).
pub fn describe_containment(cgroups: bool) -> String {
    containment::Containment::detect(cgroups).describe()
}
