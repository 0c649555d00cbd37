//! Memory access through keys: copies to and from (key, va) ranges, gather/scatter over SGE
//! lists, and whole-range key checks. Every failure is a `DmaErr`, never a panic.

use super::qp::Ctx;
use crate::types::*;

pub(super) enum DmaErr {
    Key,
    Length,
}

/// Call `f(pa, offset, n)` for each physically contiguous piece of the `len` bytes at (key, va),
/// as `keys` translates them; a refused translation, an empty extent or a memory error is
/// `DmaErr::Key`.
fn walk_key(
    keys: &mut dyn Keys,
    qpn: Qpn,
    key: KeyRef,
    va: u64,
    len: u64,
    need: Access,
    mut f: impl FnMut(u64, usize, usize) -> Result<(), MemError>,
) -> Result<(), DmaErr> {
    let mut done = 0u64;
    while done < len {
        let want = len - done;
        let e = keys.translate(qpn, key, va.wrapping_add(done), want, need).map_err(|_| DmaErr::Key)?;
        let n = e.len.min(want);
        if n == 0 {
            return Err(DmaErr::Key);
        }
        f(e.pa, done as usize, n as usize).map_err(|_| DmaErr::Key)?;
        done += n;
    }
    Ok(())
}

/// Copy `buf.len()` bytes from (key, va) into `buf`.
pub(super) fn dma_read(mem: &mut dyn Memory, keys: &mut dyn Keys, qpn: Qpn, key: KeyRef, va: u64, need: Access, buf: &mut [u8]) -> Result<(), DmaErr> {
    walk_key(keys, qpn, key, va, buf.len() as u64, need, |pa, at, n| mem.read(pa, &mut buf[at..at + n]))
}

/// Copy `data` to (key, va).
pub(super) fn dma_write(mem: &mut dyn Memory, keys: &mut dyn Keys, qpn: Qpn, key: KeyRef, va: u64, need: Access, data: &[u8]) -> Result<(), DmaErr> {
    walk_key(keys, qpn, key, va, data.len() as u64, need, |pa, at, n| mem.write(pa, &data[at..at + n]))
}

/// Read `len` bytes at message offset `off` of a send's gather list into `out`.
pub(super) fn gather(ctx: &mut Ctx<'_>, qpn: Qpn, data: &Gather, off: u64, len: usize, out: &mut Vec<u8>) -> Result<(), DmaErr> {
    out.clear();
    out.resize(len, 0);
    match data {
        Gather::Inline(b) => {
            let s = usize::try_from(off).map_err(|_| DmaErr::Length)?;
            let src = b.get(s..s + len).ok_or(DmaErr::Length)?;
            out.copy_from_slice(src);
            Ok(())
        }
        Gather::Sges(sges) => walk_sges(sges, off, len, |sge, sge_off, range| {
            dma_read(ctx.mem, ctx.keys, qpn, KeyRef::Local(sge.lkey), sge.addr.wrapping_add(sge_off), Access::NONE, &mut out[range])
        }),
    }
}

/// Write `data` at message offset `off` into a scatter list.
pub(super) fn scatter(ctx: &mut Ctx<'_>, qpn: Qpn, sges: &[Sge], off: u64, data: &[u8]) -> Result<(), DmaErr> {
    walk_sges(sges, off, data.len(), |sge, sge_off, range| {
        dma_write(ctx.mem, ctx.keys, qpn, KeyRef::Local(sge.lkey), sge.addr.wrapping_add(sge_off), Access::LOCAL_WRITE, &data[range])
    })
}

/// Call `f(sge, offset_in_sge, range_in_buffer)` for the pieces of `[off, off+len)`.
fn walk_sges(
    sges: &[Sge],
    off: u64,
    len: usize,
    mut f: impl FnMut(&Sge, u64, core::ops::Range<usize>) -> Result<(), DmaErr>,
) -> Result<(), DmaErr> {
    let mut skip = off;
    let mut pos = 0usize;
    for sge in sges {
        if pos == len {
            break;
        }
        let l = u64::from(sge.len);
        if skip >= l {
            skip -= l;
            continue;
        }
        let n = ((l - skip) as usize).min(len - pos);
        f(sge, skip, pos..pos + n)?;
        pos += n;
        skip = 0;
    }
    if pos == len {
        Ok(())
    } else {
        Err(DmaErr::Length)
    }
}

/// Whether the whole remote range translates under `rkey` with `need` (walking every extent,
/// so each byte is proven, not just the ends).
pub(super) fn check_range(ctx: &mut Ctx<'_>, qpn: Qpn, rkey: Rkey, va: u64, len: u64, need: Access) -> Result<(), DmaErr> {
    walk_key(ctx.keys, qpn, KeyRef::Remote(rkey), va, len, need, |_, _, _| Ok(()))
}

/// Placeholder memory for control paths that never touch memory.
pub(super) struct NoMem;
impl Memory for NoMem {
    fn read(&mut self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        Err(MemError { pa, len: buf.len() as u64 })
    }
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        Err(MemError { pa, len: data.len() as u64 })
    }
}
impl Keys for NoMem {
    fn translate(&mut self, _: Qpn, _: KeyRef, _: u64, _: u64, _: Access) -> Result<Extent, KeyError> {
        Err(KeyError::InvalidKey)
    }
    fn invalidate(&mut self, _: Qpn, _: Rkey) -> Result<(), KeyError> {
        Err(KeyError::InvalidKey)
    }
}
