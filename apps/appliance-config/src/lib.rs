//! appliance-config: what the appliance image's kernel command line can say, in one place the
//! image and the fuzz targets both link: the typed [`Config`], the option table [`OPTIONS`]
//! (one entry per option: name, help, setter; read by `kernel::cmdline::parse`), the storage
//! words ([`storage`]) and the checks that span several options ([`check`]). No device is
//! touched here; the image acts on the result.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

mod options;
mod role;
pub mod storage;

pub use options::{parse_bdf, Config, OPTIONS};
pub use role::{adapter_ip, check, ip_str, Role};
