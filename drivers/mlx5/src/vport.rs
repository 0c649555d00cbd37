//! The function's NIC vport context as the validation kit reads and sets it: MTU, RoCE and the
//! local-loopback switches (`disable_uc_local_lb` / `disable_mc_local_lb`, mlx5_ifc.h
//! nic_vport_context; Linux mlx5_core `mlx5_nic_vport_query_local_lb` /
//! `mlx5_nic_vport_update_local_lb` use the same fields).

use crate::cmd::op;
use crate::error::Error;
use crate::ifc::*;
use crate::layout::set;
use crate::Mlx5;
use hal::{Hal, Mmio};

/// What QUERY_NIC_VPORT_CONTEXT says about the function's own vport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VportInfo {
    /// Port MTU in bytes (the Ethernet MTU the vport carries).
    pub mtu: u16,
    pub roce_en: bool,
    /// Unicast / multicast local loopback on (the `disable_*_local_lb` bits clear).
    pub uc_local_lb: bool,
    pub mc_local_lb: bool,
}

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// QUERY_NIC_VPORT_CONTEXT of the function's own vport.
    pub fn query_vport(&mut self) -> Result<VportInfo, Error> {
        self.begin(op::QUERY_NIC_VPORT_CONTEXT, 0, query_nic_vport_context_in::LAYOUT.size);
        self.run(query_nic_vport_context_in::LAYOUT.size, query_nic_vport_context_out::LAYOUT.size)?;
        let c = query_nic_vport_context_out::nic_vport_context;
        Ok(VportInfo {
            mtu: self.out(nic_vport_context::mtu.at(c)) as u16,
            roce_en: self.out(nic_vport_context::roce_en.at(c)) == 1,
            uc_local_lb: self.out(nic_vport_context::disable_uc_local_lb.at(c)) == 0,
            mc_local_lb: self.out(nic_vport_context::disable_mc_local_lb.at(c)) == 0,
        })
    }

    /// Turn unicast local loopback on or off (MODIFY_NIC_VPORT_CONTEXT with only
    /// `field_select.disable_uc_local_lb`): with it on, frames the port sends to its own MAC
    /// address come back in, so two QPs of this function can talk with no cable or peer.
    pub fn set_local_loopback(&mut self, on: bool) -> Result<(), Error> {
        let len = modify_nic_vport_context_in::LAYOUT.size;
        self.begin(op::MODIFY_NIC_VPORT_CONTEXT, 0, len);
        let fs = modify_nic_vport_context_in::field_select;
        set(&mut self.inb, modify_nic_vport_field_select::disable_uc_local_lb.at(fs), 1);
        let c = modify_nic_vport_context_in::nic_vport_context;
        set(&mut self.inb, nic_vport_context::disable_uc_local_lb.at(c), (!on) as u64);
        self.run(len, modify_nic_vport_context_out::LAYOUT.size)
    }
}
