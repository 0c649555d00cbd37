//! BAR0's initialization-segment registers read and written by their layout fields (the one
//! place that turns a `Field` into a big-endian dword access).

use crate::layout::{set, Field};
use hal::Mmio;

/// Read a (≤32-bit, dword-contained) field from the BAR.
pub fn read_field<M: Mmio + ?Sized>(bar: &M, f: Field) -> u32 {
    let dw = (f.off / 32 * 4) as usize;
    let v = bar.read32_be(dw);
    let shift = 32 - (f.off % 32) - f.width;
    let mask = if f.width == 32 { u32::MAX } else { (1u32 << f.width) - 1 };
    (v >> shift) & mask
}

/// Write a dword-contained field: a whole dword directly (cmdq_addr_h, cmd_dbell), a narrower
/// field by reading its dword and keeping the other bits (nic_interface beside the command
/// queue address).
pub fn write_field<M: Mmio + ?Sized>(bar: &M, f: Field, v: u32) {
    let dw = (f.off / 32 * 4) as usize;
    if f.width == 32 {
        debug_assert!(f.off % 32 == 0, "whole-dword field not dword-aligned");
        bar.write32_be(dw, v);
        return;
    }
    let mut b = bar.read32_be(dw).to_be_bytes();
    set(&mut b, Field { off: f.off % 32, width: f.width }, v as u64);
    bar.write32_be(dw, u32::from_be_bytes(b));
}
