//! Every hardware layout the driver touches, declared once as field tables with `mlx5_ifc.h` names.
//!
//! Sources (facts only): Linux `include/linux/mlx5/mlx5_ifc.h` (as carried in
//! gpudirect/mlnx-ofa_kernel @2ce4cd07) and rdma-core `providers/mlx5/mlx5_ifc.h` @691953d8 for the
//! `_bits` command structs; Linux `device.h` / rdma-core `mlx5_vfio.h` for the init segment,
//! command entry, mailbox block and EQE; Linux `qp.h` / rdma-core `mlx5dv.h` for CQE and WQE
//! segments. Offsets are written in the PRM's dword notation `F(byte, hi, lo)` (bits hi..lo of
//! the big-endian dword at `byte`), `B(byte, len)` for byte-aligned blobs, `S(byte, layout)` for
//! nested structs. `tests/layout_offsets/` holds them against numbers taken from the headers.
//!
//! The tables sit in one file per object, as Linux groups `mlx5_ifc.h`: `device` (init
//! segment, command entry, EQE, CQE, WQE segments), `hca` (capabilities and the bring-up
//! commands), `vport`, `eq_cq`, `mkey`, `qp`, `srq` (RMP), `counter` (queue
//! counters), `raw` (TIS, WQ, SQ, RQ, TIR) and `flow` (NIC receive steering); every
//! struct is re-exported here, so `ifc::qpc` names it wherever it is declared.

use crate::layout::{Entry, Field, Layout};

const fn strip_raw(s: &'static str) -> &'static str {
    let b = s.as_bytes();
    if b.len() > 2 && b[0] == b'r' && b[1] == b'#' {
        s.split_at(2).1
    } else {
        s
    }
}

macro_rules! layouts {
    ($( $s:ident [$size:expr] { $($f:ident = $e:expr),* $(,)? } )*) => {
        $(
            #[allow(non_upper_case_globals, dead_code, unused_imports)]
            pub mod $s {
                use super::*;
                use crate::layout::{B, F, S};
                $( pub const $f: Field = { const E: Entry = $e; E.field }; )*
                /// Size of the struct in bytes.
                pub const SIZE: usize = $size;
                /// This struct's table.
                pub const LAYOUT: Layout = Layout {
                    name: stringify!($s),
                    size: $size,
                    entries: &[ $( (strip_raw(stringify!($f)), $e) ),* ],
                };
                const _: () = {
                    let mut i = 0;
                    while i < LAYOUT.entries.len() {
                        let f = LAYOUT.entries[i].1.field;
                        // flexible arrays (pas[], register_data[]) start exactly at the end
                        assert!((f.off + f.width) as usize <= $size * 8 || f.off as usize == $size * 8, "field outside its struct");
                        i += 1;
                    }
                };
            }
        )*
        /// This file's tables (gathered into [`super::ALL`]).
        pub(super) const TABLES: &[&Layout] = &[ $( &$s::LAYOUT ),* ];
    };
}

// The tables by object, as Linux groups mlx5_ifc.h (after the macro: macros are textually scoped).
mod device;
mod hca;
mod vport;
mod eq_cq;
mod mkey;
mod qp;
mod srq;
mod counter;
mod raw;
mod flow;
pub use device::*;
pub use hca::*;
pub use vport::*;
pub use eq_cq::*;
pub use mkey::*;
pub use qp::*;
pub use srq::*;
pub use counter::*;
pub use raw::*;
pub use flow::*;

/// The files' tables, in order.
const GROUPS: &[&[&Layout]] = &[device::TABLES, hca::TABLES, vport::TABLES, eq_cq::TABLES, mkey::TABLES, qp::TABLES, srq::TABLES, counter::TABLES, raw::TABLES, flow::TABLES];

/// How many tables there are.
const COUNT: usize = {
    let (mut n, mut g) = (0, 0);
    while g < GROUPS.len() {
        n += GROUPS[g].len();
        g += 1;
    }
    n
};

const fn gather() -> [&'static Layout; COUNT] {
    let mut out = [GROUPS[0][0]; COUNT];
    let (mut k, mut g) = (0, 0);
    while g < GROUPS.len() {
        let mut i = 0;
        while i < GROUPS[g].len() {
            out[k] = GROUPS[g][i];
            k += 1;
            i += 1;
        }
        g += 1;
    }
    out
}

static TABLES_ALL: [&Layout; COUNT] = gather();
/// Every table, for printing and lookup.
pub static ALL: &[&Layout] = &TABLES_ALL;
