//! nvme status: the Status field of a completion (Base §4.6.1, Figure 92) as typed values,
//! declared once in the `nvme-spec` crate and re-exported here.

pub use nvme_spec::status::{Status, StatusCode, StatusField};
