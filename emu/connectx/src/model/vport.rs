//! The function's NIC vport and RoCE addresses: QUERY_ / MODIFY_NIC_VPORT_CONTEXT,
//! QUERY_VPORT_STATE, SET_ / QUERY_ROCE_ADDRESS (the GID table), and port up/down events.

use super::{fail, need, out, CmdResult, Device, GID_TABLE};
use crate::consts::{event, status as st, synd, vport_state};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set, Field};

/// The permanent MAC inside `nic_vport_context` [mlx5_ifc.h mac_address_layout].
const PERM_MAC_47_32: Field = l::mac_address_layout::mac_addr_47_32.at(l::nic_vport_context::permanent_address);
const PERM_MAC_31_0: Field = l::mac_address_layout::mac_addr_31_0.at(l::nic_vport_context::permanent_address);

#[derive(Debug, Clone, Default)]
pub struct Vport {
    /// Port operational state (QUERY_VPORT_STATE); changed by `ConnectX::set_port_up`.
    pub down: bool,
    pub roce_en: bool,
    pub mac: [u8; 6],
    pub mtu: u16,
    pub promisc_uc: bool,
    pub promisc_mc: bool,
    pub promisc_all: bool,
    /// NIC vport context `disable_uc_local_lb` / `disable_mc_local_lb`: 0 (local loopback on)
    /// after ENABLE_HCA; see [`crate::loopback`].
    pub disable_uc_local_lb: bool,
    pub disable_mc_local_lb: bool,
}

impl Device {
    /// QUERY_NIC_VPORT_CONTEXT (own vport only).
    pub(super) fn query_nic_vport_context(&self, inp: &[u8]) -> CmdResult {
        if get(inp, l::query_nic_vport_context_in::other_vport) != 0 {
            return fail(st::BAD_PARAM, synd::OTHER_VPORT);
        }
        let mut o = out(l::query_nic_vport_context_out::SIZE);
        let c = &mut o[0x10..0x110];
        use l::nic_vport_context as v;
        set(c, v::roce_en, self.vport.roce_en as u64);
        set(c, v::mtu, self.vport.mtu as u64);
        set(c, v::promisc_uc, self.vport.promisc_uc as u64);
        set(c, v::promisc_mc, self.vport.promisc_mc as u64);
        set(c, v::promisc_all, self.vport.promisc_all as u64);
        set(c, v::disable_uc_local_lb, self.vport.disable_uc_local_lb as u64);
        set(c, v::disable_mc_local_lb, self.vport.disable_mc_local_lb as u64);
        let m = self.vport.mac;
        set(c, PERM_MAC_47_32, u16::from_be_bytes([m[0], m[1]]) as u64);
        set(c, PERM_MAC_31_0, u32::from_be_bytes([m[2], m[3], m[4], m[5]]) as u64);
        Ok(o)
    }

    /// MODIFY_NIC_VPORT_CONTEXT: the fields its field_select bits name.
    pub(super) fn modify_nic_vport_context(&mut self, inp: &[u8]) -> CmdResult {
        use l::modify_nic_vport_context_in as m;
        use l::nic_vport_context as v;
        if get(inp, m::other_vport) != 0 {
            return fail(st::BAD_PARAM, synd::OTHER_VPORT);
        }
        need(inp, 0x200)?;
        let c = &inp[0x100..0x200];
        if get(inp, l::modify_nic_vport_field_select::roce_en.at(m::field_select)) == 1 {
            self.vport.roce_en = get(c, v::roce_en) == 1;
        }
        if get(inp, l::modify_nic_vport_field_select::mtu.at(m::field_select)) == 1 {
            let mtu = get(c, v::mtu);
            self.check_port_mtu(mtu)?;
            self.vport.mtu = mtu as u16;
        }
        if get(inp, l::modify_nic_vport_field_select::disable_uc_local_lb.at(m::field_select)) == 1 {
            self.vport.disable_uc_local_lb = get(c, v::disable_uc_local_lb) == 1;
        }
        if get(inp, l::modify_nic_vport_field_select::disable_mc_local_lb.at(m::field_select)) == 1 {
            self.vport.disable_mc_local_lb = get(c, v::disable_mc_local_lb) == 1;
        }
        if get(inp, l::modify_nic_vport_field_select::promisc.at(m::field_select)) == 1 {
            self.vport.promisc_uc = get(c, v::promisc_uc) == 1;
            self.vport.promisc_mc = get(c, v::promisc_mc) == 1;
            self.vport.promisc_all = get(c, v::promisc_all) == 1;
        }
        if get(inp, l::modify_nic_vport_field_select::permanent_address.at(m::field_select)) == 1 {
            let hi = (get(c, PERM_MAC_47_32) as u16).to_be_bytes();
            let lo = (get(c, PERM_MAC_31_0) as u32).to_be_bytes();
            self.vport.mac = [hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]];
            self.port_changed();
        }
        Ok(out(16))
    }

    /// QUERY_VPORT_STATE.
    pub(super) fn query_vport_state(&self, op_mod: u16, inp: &[u8]) -> CmdResult {
        // op_mod 0 = own vNIC vport; 1 (e-switch vport) and 2 (uplink) and other_vport
        // need e-switch manager rights, which this function does not have.
        if op_mod != vport_state::OP_MOD_VNIC_VPORT {
            return fail(st::BAD_PARAM, synd::BAD_OP_MOD);
        }
        if get(inp, l::query_vport_state_in::other_vport) != 0 {
            return fail(st::BAD_PARAM, synd::OTHER_VPORT);
        }
        let mut o = out(16);
        set(&mut o, l::query_vport_state_out::admin_state, 1);
        set(&mut o, l::query_vport_state_out::state, if self.vport.down { vport_state::DOWN } else { vport_state::UP } as u64);
        Ok(o)
    }

    /// SET_ROCE_ADDRESS: write (or clear, with all zeros) one GID table entry.
    pub(super) fn set_roce_address(&mut self, inp: &[u8]) -> CmdResult {
        need(inp, l::set_roce_address_in::SIZE)?;
        let idx = get(inp, l::set_roce_address_in::roce_address_index) as usize;
        if idx >= GID_TABLE {
            return fail(st::BAD_PARAM, synd::BAD_GID_INDEX);
        }
        if get(inp, l::set_roce_address_in::vhca_port_num) > 1 {
            return fail(st::BAD_PARAM, synd::BAD_PORT);
        }
        let mut e = [0u8; 0x20];
        e.copy_from_slice(&inp[0x10..0x30]);
        let ver = get(&e, l::roce_addr_layout::roce_version);
        let l3 = get(&e, l::roce_addr_layout::roce_l3_type);
        if !matches!(ver, 0 | 2) || l3 > 1 {
            return fail(st::BAD_PARAM, synd::BAD_ROCE_VERSION);
        }
        // An all-zero address clears the entry (how Linux deletes a GID).
        self.gids[idx] = if e[..16].iter().all(|&b| b == 0) { None } else { Some(e) };
        self.port_changed();
        Ok(out(16))
    }

    /// QUERY_ROCE_ADDRESS.
    pub(super) fn query_roce_address(&self, inp: &[u8]) -> CmdResult {
        let idx = get(inp, l::query_roce_address_in::roce_address_index) as usize;
        if idx >= GID_TABLE {
            return fail(st::BAD_PARAM, synd::BAD_GID_INDEX);
        }
        let mut o = out(l::query_roce_address_out::SIZE);
        if let Some(e) = self.gids[idx] {
            o[0x10..0x30].copy_from_slice(&e);
        }
        Ok(o)
    }

    /// Port goes up or down: vport state follows and a PORT_CHANGE EQE (sub_type 4 active,
    /// 1 down; port number in data+8 bits 7:4) is posted. Returns whether an EQ took it.
    pub fn set_port_up(&mut self, up: bool) -> bool {
        self.vport.down = !up;
        let mut d = [0u8; 28];
        d[8] = 1 << 4;
        self.raise_event(event::PORT_CHANGE, if up { 4 } else { 1 }, &d)
    }
}
