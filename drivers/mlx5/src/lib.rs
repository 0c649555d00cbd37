//! ConnectX-4/5/6/7 (mlx5) driver: layouts as data, firmware command interface, bring-up.
//!
//! Everything goes through `hal` (DMA regions, BAR0 as `Mmio`, time); there is no `unsafe`.
#![no_std]
#![forbid(unsafe_code)]

pub mod ifc;
pub mod layout;
