//! Duplex and the data plane: the host side of one duplex channel (`channel`), the route
//! table and its process-wide slot ceiling (`routes`), the `envrt.dataPlane` socket pair
//! (`dataplane`) and an execute's stdin streamed over it (`exec_stdin`).

pub(crate) mod channel;
pub(crate) mod dataplane;
pub(crate) mod exec_stdin;
pub(crate) mod routes;
