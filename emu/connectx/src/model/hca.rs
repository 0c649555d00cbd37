//! The function's life: ENABLE_HCA / DISABLE_HCA, QUERY_ / SET_ISSI, INIT_HCA (TEARDOWN_HCA and
//! fast teardown: [`super::teardown`]), ACCESS_REG, and the function-level reset.

use log::warn;

use super::{fail, need, out, CmdResult, Device, FuncState, Vport, GID_TABLE};
use crate::consts::{access_reg, reg, status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};

impl Device {
    /// ENABLE_HCA: the function starts afresh (ISSI, caps, vport, GIDs).
    pub(super) fn enable_hca(&mut self, inp: &[u8]) -> CmdResult {
        if get(inp, l::enable_hca_in::function_id) != 0 {
            return fail(st::BAD_PARAM, synd::BAD_FUNCTION_ID);
        }
        self.func = FuncState::Enabled;
        self.issi = 0;
        self.extra_regular = 0;
        self.page_req_outstanding = 0;
        self.reset_caps();
        // The vport's context starts afresh; the link (cable, peer) is physical and
        // keeps its state.
        self.vport = Vport { mac: self.cfg.mac, mtu: 1500, down: self.vport.down, ..Default::default() };
        self.gids = vec![None; GID_TABLE];
        self.host_endianness_le = None;
        Ok(out(16))
    }

    /// DISABLE_HCA: pages still held are counted as abandoned.
    pub(super) fn disable_hca(&mut self, inp: &[u8]) -> CmdResult {
        if self.func == FuncState::Initialized {
            return fail(st::BAD_SYS_STATE, synd::STILL_INITIALIZED);
        }
        if get(inp, l::enable_hca_in::function_id) != 0 {
            return fail(st::BAD_PARAM, synd::BAD_FUNCTION_ID);
        }
        if !self.pages.is_empty() {
            warn!("cx: DISABLE_HCA with {} pages still held by firmware", self.pages.len());
            self.ctr.pages_abandoned += self.pages.len() as u64;
            self.pages.clear();
        }
        self.func = FuncState::Disabled;
        Ok(out(16))
    }

    /// QUERY_ISSI.
    pub(super) fn query_issi(&self) -> CmdResult {
        let mut o = out(l::query_issi_out::SIZE);
        set(&mut o, l::query_issi_out::current_issi, self.issi as u64);
        set(&mut o, l::query_issi_out::supported_issi_dw0, self.cfg.profile.supported_issi as u64);
        Ok(o)
    }

    /// SET_ISSI: one of the profile's supported ISSIs, before INIT_HCA.
    pub(super) fn set_issi(&mut self, inp: &[u8]) -> CmdResult {
        if self.func != FuncState::Enabled {
            return fail(st::BAD_SYS_STATE, synd::ALREADY_INITIALIZED);
        }
        let v = get(inp, l::set_issi_in::current_issi);
        if v >= 32 || self.cfg.profile.supported_issi & (1 << v) == 0 {
            return fail(st::BAD_PARAM, synd::UNSUPPORTED_ISSI);
        }
        self.issi = v as u16;
        Ok(out(16))
    }

    /// INIT_HCA: needs the boot and init pages; starts the RoCE engine.
    pub(super) fn init_hca(&mut self) -> CmdResult {
        if self.func != FuncState::Enabled {
            return fail(st::BAD_SYS_STATE, synd::ALREADY_INITIALIZED);
        }
        let held = self.pages.len() as u32;
        if held < self.cfg.profile.pages.boot {
            return fail(st::BAD_SYS_STATE, synd::MISSING_BOOT_PAGES);
        }
        if held < self.cfg.profile.pages.boot + self.cfg.profile.pages.init {
            return fail(st::BAD_SYS_STATE, synd::MISSING_INIT_PAGES);
        }
        self.func = FuncState::Initialized;
        self.page_req_outstanding = 0;
        self.engine = Some(emu_roce::Engine::new(self.port_config()));
        Ok(out(16))
    }

    pub(super) fn access_reg(&mut self, op_mod: u16, inp: &[u8]) -> CmdResult {
        let id = get(inp, l::access_register_in::register_id) as u16;
        let data = &inp[16..];
        let read = op_mod == access_reg::READ;
        match id {
            reg::HOST_ENDIANNESS => {
                self.check_host_endianness_access(!read)?;
                need(inp, 16 + l::host_endianness_reg::SIZE)?;
                let mut o = out(16 + l::host_endianness_reg::SIZE);
                if read {
                    let he = self.host_endianness_le.map(|le| !le).unwrap_or(false);
                    set(&mut o[16..], l::host_endianness_reg::he, he as u64);
                } else {
                    self.host_endianness_le = Some(get(data, l::host_endianness_reg::he) == 0);
                    o[16..].copy_from_slice(&data[..l::host_endianness_reg::SIZE]);
                }
                Ok(o)
            }
            reg::PMTU => self.pmtu_reg(read, data),
            reg::PAOS => {
                // Accepted; port is always up. Echo the register back.
                let mut o = out(inp.len());
                o[16..].copy_from_slice(data);
                Ok(o)
            }
            _ => fail(st::BAD_PARAM, synd::UNKNOWN_REGISTER),
        }
    }

    /// PCI function-level reset: all firmware state is lost (objects and pages are counted as
    /// abandoned), the command queue address is cleared and `initializing` is set again for
    /// `init_delay_ns`. Fault knobs and event counters survive.
    pub fn function_reset(&mut self) {
        let live = self.ctr_live().live_objects();
        self.ctr.objects_abandoned += live as u64;
        self.ctr.pages_abandoned += self.pages.len() as u64;
        let (faults, mut ctr, link) = (self.faults.clone(), self.ctr.clone(), self.link.take());
        ctr.rx_bad_icrc_before_resets += self.engine.as_ref().map_or(0, |e| e.counters().rx_bad_icrc);
        let (mem, clock, cfg) = (self.mem.clone(), self.clock.clone(), self.cfg.clone());
        *self = Device::new(mem, clock, cfg);
        self.faults = faults;
        self.ctr = ctr;
        self.link = link;
    }

    /// A PCIe Function Level Reset from the platform, if the function offers it
    /// ([`Config::flr`]): the same loss of state as [`Device::function_reset`], counted.
    pub fn function_level_reset(&mut self) -> bool {
        if !self.cfg.flr {
            return false;
        }
        warn!("cx: function level reset");
        self.function_reset();
        self.ctr.flrs += 1;
        true
    }

    /// Whether the firmware has a fatal health syndrome set.
    pub fn set_health_syndrome(&mut self, synd: u8) {
        self.health_synd = synd;
    }
}
