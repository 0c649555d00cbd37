//! The function's NIC vport context as the validation kit reads and sets it: MTU, RoCE and the
//! local-loopback switches (`disable_uc_local_lb` / `disable_mc_local_lb`, mlx5_ifc.h
//! nic_vport_context; Linux mlx5_core `mlx5_nic_vport_query_local_lb` /
//! `mlx5_nic_vport_update_local_lb` use the same fields); and the port MTU register (PMTU: max,
//! admin and operational MTU, mlx5_ifc.h pmtu_reg, register 0x5003 as Linux
//! `mlx5_query_port_mtu` reads it), which bounds the path MTU of every QP.

use crate::cmd::op;
use crate::error::Error;
use crate::ifc::*;
use crate::layout::{set, Field};
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

/// Access register ID of PMTU (Linux `MLX5_REG_PMTU`).
const REG_PMTU: u64 = mlx5_ifc::reg::PMTU as u64;
/// ACCESS_REG op_mod (Linux `mlx5_core_access_reg`: 1 read, 0 write).
const REG_READ: u16 = mlx5_ifc::access_reg::READ;
const REG_WRITE: u16 = mlx5_ifc::access_reg::WRITE;

/// The port's MTUs in bytes, from the PMTU register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortMtu {
    pub max: u16,
    pub admin: u16,
    pub oper: u16,
}

impl Default for PortMtu {
    /// Before PMTU is read: an Ethernet port of 1500 bytes.
    fn default() -> Self {
        PortMtu { max: 1500, admin: 1500, oper: 1500 }
    }
}

impl PortMtu {
    /// Largest IB path MTU (256..4096) whose RoCEv2 packets fit in the port's max MTU (as
    /// Linux `iboe_get_mtu` picks the active MTU from the netdev MTU).
    pub fn max_path_mtu(&self) -> u32 {
        let room = (self.max as u32).saturating_sub(rdma::cm_wire::ROCEV2_MTU_OVERHEAD);
        [4096u32, 2048, 1024, 512].into_iter().find(|&m| m <= room).unwrap_or(256)
    }
}

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// Read the PMTU register of port 1.
    pub fn query_port_mtu(&mut self) -> Result<PortMtu, Error> {
        let len = access_register_in::LAYOUT.size + pmtu_reg::LAYOUT.size;
        self.begin(op::ACCESS_REG, REG_READ, len);
        set(&mut self.inb, access_register_in::register_id, REG_PMTU);
        let data = Field { off: access_register_in::LAYOUT.size as u32 * 8, width: 0 };
        set(&mut self.inb, pmtu_reg::local_port.at(data), 1);
        self.run(len, access_register_out::LAYOUT.size + pmtu_reg::LAYOUT.size)?;
        let out = Field { off: access_register_out::LAYOUT.size as u32 * 8, width: 0 };
        let p = PortMtu {
            max: self.out(pmtu_reg::max_mtu.at(out)) as u16,
            admin: self.out(pmtu_reg::admin_mtu.at(out)) as u16,
            oper: self.out(pmtu_reg::oper_mtu.at(out)) as u16,
        };
        if p.max == 0 {
            return Err(Error::BadOutput { opcode: op::ACCESS_REG, what: "PMTU max_mtu 0" });
        }
        Ok(p)
    }

    /// Set the port MTU (PMTU admin_mtu, as Linux `mlx5_set_port_mtu`), clamped to the port's
    /// max_mtu; returns the operational MTU the port then reports.
    pub fn set_port_mtu(&mut self, mtu: u16) -> Result<u16, Error> {
        let want = mtu.min(self.port_mtu.max);
        let len = access_register_in::LAYOUT.size + pmtu_reg::LAYOUT.size;
        self.begin(op::ACCESS_REG, REG_WRITE, len);
        set(&mut self.inb, access_register_in::register_id, REG_PMTU);
        let data = Field { off: access_register_in::LAYOUT.size as u32 * 8, width: 0 };
        set(&mut self.inb, pmtu_reg::local_port.at(data), 1);
        set(&mut self.inb, pmtu_reg::admin_mtu.at(data), want as u64);
        self.run(len, access_register_out::LAYOUT.size + pmtu_reg::LAYOUT.size)?;
        self.port_mtu = self.query_port_mtu()?;
        Ok(self.port_mtu.oper)
    }

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
