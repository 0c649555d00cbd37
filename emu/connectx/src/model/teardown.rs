//! TEARDOWN_HCA and fast teardown: graceful close, force close, and the fast-teardown handshake
//! through the initialization segment's `nic_interface` field.
//!
//! Facts (Linux/rdma-core `mlx5_ifc.h`; the sequence as Linux `fw.c`
//! `mlx5_cmd_fast_teardown_hca` and rdma-core `mlx5_vfio.c` drive it):
//! - `teardown_hca_in.profile`: 0 GRACEFUL_CLOSE, 1 FORCE_CLOSE, 2 PREPARE_FAST_TEARDOWN;
//!   `teardown_hca_out.state` (one bit): 0 success, 1 FORCE_STATE_FAIL.
//! - Fast teardown is offered when `cmd_hca_cap.fast_teardown` is set, force close when
//!   `force_teardown` is. After PREPARE_FAST_TEARDOWN answered state 0, the driver writes
//!   `nic_interface` = DISABLED (1) into dword 0x14 (address bits kept) and polls that field
//!   until it reads DISABLED: the function is then closed and its DMA stopped, without the
//!   driver returning pages or disabling the HCA (Linux's error-state path frees them itself).
//! - `nic_interface` values: 0 FULL_DRIVER, 1 DISABLED, 2 NO_DRAM_NIC, 7 SW_RESET (the
//!   function resets as by FLR; the driver's device recovery writes it).
//!
//! The model's own choices (no public source fixes them) say so where they are made.

use log::warn;

use super::{fail, out, CmdResult, Device, FuncState};
use crate::consts::{status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set};

pub use mlx5_ifc::nic_interface as nic_ifc;
pub use mlx5_ifc::teardown::{profile, FORCE_STATE_FAIL, FORCE_STATE_SUCCESS};
/// Virtual time the firmware takes to close the function after `nic_interface` = DISABLED
/// (representative: Linux waits up to its TEARDOWN timeout, 3 s by default, polling).
pub const FAST_TEARDOWN_NS: u64 = 200_000;

/// Where the fast-teardown handshake is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FastTeardown {
    /// No fast teardown asked for.
    #[default]
    Idle,
    /// PREPARE_FAST_TEARDOWN succeeded; waiting for `nic_interface` = DISABLED.
    Prepared,
    /// The function is closed; `nic_interface` reads DISABLED from `at_ns` on. Commands are
    /// not executed until the driver writes FULL_DRIVER (a new command queue address).
    Disabled { at_ns: u64 },
}

impl Device {
    /// TEARDOWN_HCA: graceful or force close (every object goes; the ones still alive are
    /// counted as abandoned), or the first step of a fast teardown.
    pub(super) fn teardown_hca(&mut self, inp: &[u8]) -> CmdResult {
        if self.func != FuncState::Initialized {
            return fail(st::BAD_SYS_STATE, synd::NOT_INITIALIZED);
        }
        let prof = get(inp, l::teardown_hca_in::profile);
        let caps = &self.cfg.profile.caps;
        let state = match prof {
            profile::GRACEFUL_CLOSE if self.faults.fail_graceful_teardown => {
                warn!("cx: graceful TEARDOWN_HCA refused (fault knob)");
                return Err((st::INT_ERR, synd::TEARDOWN_REFUSED));
            }
            profile::GRACEFUL_CLOSE => FORCE_STATE_SUCCESS,
            profile::FORCE_CLOSE if caps.force_teardown => {
                if self.faults.fail_force_teardown {
                    FORCE_STATE_FAIL
                } else {
                    FORCE_STATE_SUCCESS
                }
            }
            profile::PREPARE_FAST_TEARDOWN if caps.fast_teardown => {
                let s = if self.faults.fail_fast_teardown { FORCE_STATE_FAIL } else { FORCE_STATE_SUCCESS };
                if s == FORCE_STATE_SUCCESS {
                    // Nothing is closed yet: that happens when the driver disables the interface.
                    self.fast_teardown = FastTeardown::Prepared;
                    self.ctr.fast_teardowns_prepared += 1;
                }
                let mut o = out(16);
                set(&mut o, l::teardown_hca_out::state, s);
                return Ok(o);
            }
            _ => return Err((st::BAD_PARAM, synd::BAD_TEARDOWN_PROFILE)),
        };
        if state == FORCE_STATE_SUCCESS {
            self.close_function();
            self.func = FuncState::TornDown;
        }
        let mut o = out(16);
        set(&mut o, l::teardown_hca_out::state, state);
        Ok(o)
    }

    /// The `nic_interface` the initialization segment reports.
    pub(super) fn nic_interface(&self) -> u8 {
        match self.fast_teardown {
            FastTeardown::Disabled { at_ns } if self.clock.now_ns() >= at_ns => nic_ifc::DISABLED,
            _ => nic_ifc::FULL_DRIVER,
        }
    }

    /// The driver wrote dword 0x14 with `nic_interface` = `v`.
    pub(super) fn nic_interface_write(&mut self, v: u8) {
        match (v, self.fast_teardown) {
            (nic_ifc::FULL_DRIVER, _) => self.fast_teardown = FastTeardown::Idle,
            // A software reset request (the driver's recovery of a dead function): the
            // function resets as by FLR: every object and page lost, the command queue
            // address cleared, `initializing` set until the firmware is ready again.
            (nic_ifc::SW_RESET, _) => {
                warn!("cx: software reset requested through nic_interface");
                self.function_reset();
                self.ctr.sw_resets += 1;
            }
            (nic_ifc::DISABLED, FastTeardown::Prepared) if !self.faults.stuck_fast_teardown => {
                // The function closes: objects dropped, DMA stopped, every page released back
                // to the host (the firmware no longer touches them).
                self.close_function();
                let n = self.pages.len() as u64;
                self.pages.clear();
                self.ctr.pages_released_by_fast_teardown += n;
                self.ctr.fast_teardowns += 1;
                self.func = FuncState::Disabled;
                self.fast_teardown = FastTeardown::Disabled { at_ns: self.clock.now_ns().saturating_add(FAST_TEARDOWN_NS) };
            }
            // Model's choice: a disable request without a prepared fast teardown (or with the
            // stuck knob) is not acted on; the field keeps reading FULL_DRIVER.
            _ => self.ctr.ignored_nic_interface_writes += 1,
        }
    }

    /// Whether the command interface executes commands (not after a fast teardown).
    pub(super) fn commands_on(&self) -> bool {
        !matches!(self.fast_teardown, FastTeardown::Disabled { .. })
    }

    /// Drop every object the function holds (TEARDOWN_HCA and fast teardown); objects the
    /// driver had not destroyed are counted as abandoned.
    fn close_function(&mut self) {
        let live = self.ctr_live().live_objects();
        if live > 0 {
            warn!("cx: TEARDOWN_HCA with {live} objects still alive");
            self.ctr.objects_abandoned += live as u64;
        }
        self.uars.clear();
        self.pds.clear();
        self.tds.clear();
        self.eqs.clear();
        self.cqs.clear();
        self.qps.clear();
        self.rmps.clear();
        self.qcounters.clear();
        self.mkeys.clear();
        self.gids = vec![None; super::GID_TABLE];
        self.sq_doorbells.clear();
        self.engine = None;
        self.loopback.clear();
        self.raw = crate::raw::Raw::default();
    }
}
