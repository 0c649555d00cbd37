//! The TEARDOWN_HCA ladder: graceful close; if the firmware refuses, fast teardown; if that
//! is not offered or fails, force close.
//!
//! Facts from `mlx5_ifc.h` (profiles, the one-bit output `state`, `nic_interface` values) and
//! the order of operations of Linux `fw.c` (`mlx5_cmd_fast_teardown_hca`,
//! `mlx5_cmd_force_teardown_hca`) and rdma-core `mlx5_vfio.c` (fast teardown before a regular
//! one). Fast teardown: TEARDOWN_HCA with PREPARE_FAST_TEARDOWN, state must not be FAIL, then
//! `nic_interface` = DISABLED written into init-segment dword 0x14 (address bits kept) and the
//! field polled until it reads DISABLED. The function is then closed and its DMA stopped: the
//! firmware pages are the driver's again without MANAGE_PAGES, and no DISABLE_HCA follows
//! (as Linux after a fast unload, which frees the pages itself).

use crate::cmd::op;
use crate::device::Mlx5;
use crate::error::Error;
use crate::ifc::{init_seg, teardown_hca_in, teardown_hca_out};
use crate::layout::set;
use hal::{Hal, Mmio};

use mlx5_ifc::teardown::{profile, FORCE_STATE_FAIL};
const NIC_IFC_FULL_DRIVER: u32 = mlx5_ifc::nic_interface::FULL_DRIVER as u32;
const NIC_IFC_DISABLED: u32 = mlx5_ifc::nic_interface::DISABLED as u32;
/// How long the firmware may take to close the function after `nic_interface` = DISABLED
/// (Linux's default TEARDOWN timeout, 3 s).
pub const FAST_TEARDOWN_TIMEOUT_NS: u64 = 3_000_000_000;

/// The rung of the ladder that closed the function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    Graceful,
    /// Function closed by fast teardown: the pages are back without MANAGE_PAGES and the
    /// command interface is off (no DISABLE_HCA).
    Fast,
    Force,
}

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    /// TEARDOWN_HCA graceful; then fast teardown where `fast_teardown` is offered; then force
    /// close where `force_teardown` is. Returns the rung that closed the function, or the
    /// error of the last rung tried.
    pub(crate) fn teardown_hca(&mut self) -> Result<Rung, Error> {
        let mut err = match self.teardown_cmd(profile::GRACEFUL_CLOSE) {
            Ok(()) => return Ok(Rung::Graceful),
            // A refusal: try the next rung. No answer at all (timeout, dead firmware): stop.
            Err(e @ Error::Command { .. }) => e,
            Err(e) => return Err(e),
        };
        log::warn!("mlx5: graceful teardown failed ({err})");
        if self.caps.fast_teardown {
            match self.fast_teardown() {
                Ok(()) => {
                    self.stats.fast_teardowns += 1;
                    return Ok(Rung::Fast);
                }
                Err(e @ (Error::Command { .. } | Error::BadOutput { .. })) => {
                    log::warn!("mlx5: fast teardown failed ({e})");
                    err = e;
                }
                Err(e) => return Err(e),
            }
        }
        if !self.caps.force_teardown {
            return Err(err);
        }
        log::warn!("mlx5: forcing teardown");
        self.teardown_cmd(profile::FORCE_CLOSE)?;
        self.stats.force_teardowns += 1;
        Ok(Rung::Force)
    }

    /// One TEARDOWN_HCA; a FAIL state in the output is an error.
    fn teardown_cmd(&mut self, prof: u64) -> Result<(), Error> {
        self.begin(op::TEARDOWN_HCA, 0, teardown_hca_in::LAYOUT.size);
        set(&mut self.inb, teardown_hca_in::profile, prof);
        self.run(teardown_hca_in::LAYOUT.size, teardown_hca_out::LAYOUT.size)?;
        if prof != profile::GRACEFUL_CLOSE && self.out(teardown_hca_out::state) == FORCE_STATE_FAIL {
            return Err(Error::BadOutput { opcode: op::TEARDOWN_HCA, what: "teardown state FAIL" });
        }
        Ok(())
    }

    /// PREPARE_FAST_TEARDOWN, `nic_interface` = DISABLED, wait until it reads DISABLED. On a
    /// timeout `nic_interface` is set back to FULL_DRIVER so the next rung can run.
    fn fast_teardown(&mut self) -> Result<(), Error> {
        self.teardown_cmd(profile::PREPARE_FAST_TEARDOWN)?;
        self.set_nic_interface(NIC_IFC_DISABLED);
        let start = self.hal.now_ns();
        loop {
            if crate::bar::read_field(&self.bar, init_seg::nic_interface) == NIC_IFC_DISABLED {
                return Ok(());
            }
            if self.hal.now_ns().wrapping_sub(start) >= FAST_TEARDOWN_TIMEOUT_NS {
                self.set_nic_interface(NIC_IFC_FULL_DRIVER);
                return Err(Error::BadOutput { opcode: op::TEARDOWN_HCA, what: "nic_interface never read DISABLED after fast teardown" });
            }
            self.hal.relax();
        }
    }

    /// Write `nic_interface` into init-segment dword 0x14, keeping the command queue address.
    pub(crate) fn set_nic_interface(&self, v: u32) {
        crate::bar::write_field(&self.bar, init_seg::nic_interface, v);
    }
}
