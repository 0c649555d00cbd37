//! mgmt: the appliance's management plane. smoltcp (ARP with ageing, ICMP echo, IPv4, TCP) over
//! a raw Ethernet frame port (the ConnectX raw queue, [`port::FramePort`]), serving Prometheus
//! metrics (`GET /metrics`), a one-page HTML status (`GET /`) and the port's subsystem links
//! (`/ports/P/subsystems[/NQN]`, [`http`]) on a fixed number of sockets.
//!
//! The stack runs from the main poll loop with a bounded budget per turn (a fixed number of
//! frames in and out, [`stack::Budget`]), so it never competes with the RoCE fast path for
//! more than that; RoCE frames never reach it (the adapter's RoCE engine takes them first).
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod config;
pub mod device;
pub mod http;
pub mod port;
pub mod prom;
pub mod report;
pub mod stack;

pub use config::MgmtConfig;
pub use port::FramePort;
pub use stack::{Answer, Budget, Mgmt, MgmtStats, Page, Rendered};
