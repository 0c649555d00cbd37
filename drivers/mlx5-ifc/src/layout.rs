//! Layouts as data: named big-endian bit fields (offset from the outermost struct, width) and generic get/set.
//!
//! Bit numbering follows `mlx5_ifc.h`: bit 0 is the most significant bit of byte 0, a field of
//! width `w` at bit offset `o` covers bits `o..o+w` in that order (big-endian).

/// One field: bit offset from the start of its struct and width in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub off: u32,
    pub width: u32,
}

impl Field {
    /// The same field placed inside an enclosing struct at `base`.
    pub const fn at(self, base: Field) -> Field {
        Field { off: self.off + base.off, width: self.width }
    }
    /// Byte offset (field must start on a byte boundary).
    pub const fn byte(self) -> usize {
        (self.off / 8) as usize
    }
    /// Byte length (rounded up).
    pub const fn bytes(self) -> usize {
        self.width.div_ceil(8) as usize
    }
    /// The same field inside a struct embedded `byte` bytes from the start (array elements,
    /// entries of a command's inline part).
    pub const fn at_byte(self, byte: usize) -> Field {
        Field { off: self.off + byte as u32 * 8, width: self.width }
    }
    /// Element `i` of `width` bits of an array field (e.g. one u64 of `event_bitmask[4]`).
    pub const fn element(self, width: u32, i: u32) -> Field {
        Field { off: self.off + i * width, width }
    }
    /// The `i`-th element of an array whose first element is this field.
    pub const fn index(self, i: u32) -> Field {
        Field { off: self.off + i * self.width, width: self.width }
    }
}

/// An entry of a layout table: a leaf field or a nested struct.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub field: Field,
    pub sub: Option<&'static Layout>,
}

/// A struct's table: its name (as in `mlx5_ifc.h`, without prefix/suffix), size in bytes, entries.
#[derive(Debug)]
pub struct Layout {
    pub name: &'static str,
    pub size: usize,
    pub entries: &'static [(&'static str, Entry)],
}

/// A field in the PRM's notation: bits `hi..=lo` of the big-endian dword at byte `dw`.
pub const fn dw(dw: u32, hi: u32, lo: u32) -> Field {
    Field { off: dw * 8 + (31 - hi), width: hi - lo + 1 }
}

#[allow(non_snake_case)]
pub(crate) const fn F(dw_off: u32, hi: u32, lo: u32) -> Entry {
    Entry { field: dw(dw_off, hi, lo), sub: None }
}
#[allow(non_snake_case)]
pub(crate) const fn B(byte: u32, len: u32) -> Entry {
    Entry { field: Field { off: byte * 8, width: len * 8 }, sub: None }
}
#[allow(non_snake_case)]
pub(crate) const fn S(byte: u32, l: &'static Layout) -> Entry {
    Entry { field: Field { off: byte * 8, width: (l.size * 8) as u32 }, sub: Some(l) }
}

/// Read a field of at most 64 bits. Bytes past the end of `buf` read as zero, so a short
/// buffer (a command output the other side cut short) never panics.
/// Whole-byte fields (most WQE/CQE fields) take a direct big-endian load; with the field a
/// constant, the branch folds away at compile time.
#[inline]
pub fn get(buf: &[u8], f: Field) -> u64 {
    // Wider than a byte, narrower than a dword, not a whole aligned u16, inside one aligned
    // big-endian dword (QPNs, CQNs, keys' indexes: 24 bits): one dword load, shift and mask.
    if f.width > 8 && f.width < 32 && !(f.width == 16 && f.off % 8 == 0) && f.off / 32 == (f.off + f.width - 1) / 32 {
        let at = (f.off / 32 * 4) as usize;
        if let Some(&[a, b, c, d]) = buf.get(at..at + 4) {
            let dword = u32::from_be_bytes([a, b, c, d]);
            return u64::from((dword >> (32 - f.off % 32 - f.width)) & ((1u32 << f.width) - 1));
        }
    }
    if f.off % 8 == 0 && f.width % 8 == 0 && f.width <= 64 && f.width > 0 {
        let (first, n) = ((f.off / 8) as usize, (f.width / 8) as usize);
        if let Some(src) = buf.get(first..first + n) {
            let mut be = [0u8; 8];
            be[8 - n..].copy_from_slice(src);
            return u64::from_be_bytes(be);
        }
    } else if f.width > 0 && f.off % 8 + f.width <= 8 {
        // Inside one byte (opcode/owner nibbles and flags): shift and mask that byte.
        if let Some(b) = buf.get((f.off / 8) as usize) {
            let tail = 8 - (f.off % 8 + f.width);
            return ((b >> tail) as u64) & ((1u64 << f.width) - 1);
        }
    }
    get_bits(buf, f)
}

fn get_bits(buf: &[u8], f: Field) -> u64 {
    debug_assert!(f.width <= 64 && f.width > 0);
    if f.width == 0 {
        return 0;
    }
    let first = (f.off / 8) as usize;
    let last = ((f.off + f.width - 1) / 8) as usize;
    let mut acc: u128 = 0;
    for i in first..=last {
        acc = (acc << 8) | buf.get(i).copied().unwrap_or(0) as u128;
    }
    let tail = (last as u32 + 1) * 8 - (f.off + f.width);
    let mask: u128 = 1u128.checked_shl(f.width.min(64)).map_or(u128::MAX, |m| m - 1);
    ((acc >> tail) & mask) as u64
}

/// `v`, cut to field `f`'s width, at `f`'s place in the big-endian 64-bit word that starts at
/// byte `word` of its struct, so a segment can be built as whole words (one store each) with
/// the field still this table's. `f` must lie inside that word; with `f` and `word` constants
/// the check and the shift fold at compile time.
#[inline(always)]
pub const fn in_be64(f: Field, word: usize, v: u64) -> u64 {
    let start = word as u32 * 8;
    assert!(f.width > 0 && f.off >= start && f.off + f.width <= start + 64, "field outside the word");
    let mask = if f.width == 64 { u64::MAX } else { (1u64 << f.width) - 1 };
    (v & mask) << (start + 64 - f.off - f.width)
}

/// Write a field of at most 64 bits (value truncated to the width). Whole-byte fields take a
/// direct big-endian store (see [`get`]).
#[inline]
pub fn set(buf: &mut [u8], f: Field, v: u64) {
    if f.off % 8 == 0 && f.width % 8 == 0 && f.width <= 64 && f.width > 0 {
        let (first, n) = ((f.off / 8) as usize, (f.width / 8) as usize);
        buf[first..first + n].copy_from_slice(&v.to_be_bytes()[8 - n..]);
        return;
    }
    if f.width > 0 && f.off % 8 + f.width <= 8 {
        let tail = 8 - (f.off % 8 + f.width);
        let mask = (((1u16 << f.width) - 1) << tail) as u8;
        let b = &mut buf[(f.off / 8) as usize];
        *b = (*b & !mask) | (((v as u8) << tail) & mask);
        return;
    }
    set_bits(buf, f, v)
}

fn set_bits(buf: &mut [u8], f: Field, v: u64) {
    debug_assert!(f.width <= 64 && f.width > 0);
    let first = (f.off / 8) as usize;
    let last = ((f.off + f.width - 1) / 8) as usize;
    let mut acc: u128 = 0;
    for b in &buf[first..=last] {
        acc = (acc << 8) | *b as u128;
    }
    let tail = (last as u32 + 1) * 8 - (f.off + f.width);
    let mask: u128 = ((1u128 << f.width) - 1) << tail;
    acc = (acc & !mask) | (((v as u128) << tail) & mask);
    for (i, b) in buf[first..=last].iter_mut().enumerate().rev() {
        let shift = (last - first - i) * 8;
        *b = (acc >> shift) as u8;
    }
}

/// The bytes of a byte-aligned field (addresses, GIDs, capability blocks).
pub fn bytes(buf: &[u8], f: Field) -> &[u8] {
    &buf[f.byte()..f.byte() + f.bytes()]
}

/// Copy `data` into a byte-aligned field (at most its length).
pub fn set_bytes(buf: &mut [u8], f: Field, data: &[u8]) {
    let n = core::cmp::min(data.len(), f.bytes());
    buf[f.byte()..f.byte() + n].copy_from_slice(&data[..n]);
}

/// Visit every leaf field as (`path segments`, absolute field), depth first.
pub fn walk(l: &'static Layout, mut visit: impl FnMut(&[&str], Field)) {
    let mut path: [&str; 8] = [""; 8];
    path[0] = l.name;
    walk_inner(l, 0, &mut path, 1, &mut visit);
}

fn walk_inner(
    l: &'static Layout,
    base: u32,
    path: &mut [&'static str; 8],
    depth: usize,
    visit: &mut impl FnMut(&[&str], Field),
) {
    for (name, e) in l.entries {
        path[depth] = name;
        let f = Field { off: e.field.off + base, width: e.field.width };
        match e.sub {
            Some(sub) if depth + 1 < path.len() => walk_inner(sub, f.off, path, depth + 1, visit),
            _ => visit(&path[..=depth], f),
        }
    }
}

/// Find a field (or nested struct) by its dotted name, e.g. `create_cq_in.cq_context.log_cq_size`.
pub fn lookup(layouts: &[&'static Layout], dotted: &str) -> Option<Field> {
    let mut parts = dotted.split('.').peekable();
    let top = parts.next()?;
    let mut l = *layouts.iter().find(|l| l.name == top)?;
    let mut base = 0u32;
    while let Some(p) = parts.next() {
        let (_, e) = l.entries.iter().find(|(n, _)| *n == p)?;
        let f = Field { off: e.field.off + base, width: e.field.width };
        if parts.peek().is_none() {
            return Some(f);
        }
        l = e.sub?;
        base = f.off;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_set_roundtrip_unaligned() {
        let mut b = [0u8; 16];
        let f = Field { off: 5, width: 13 };
        set(&mut b, f, 0x1abc);
        assert_eq!(get(&b, f), 0x1abc & 0x1fff);
        assert_eq!(b[0], 0b0000_0110); // bits 5..7 of byte 0 = top 3 bits of 0x1abc (13 bits)
        let g = dw(0x08, 23, 0);
        set(&mut b, g, 0xffffff);
        assert_eq!(&b[8..12], &[0, 0xff, 0xff, 0xff]);
        assert_eq!(get(&b, f), 0x1abc);
        let w = Field { off: 64, width: 64 };
        set(&mut b, w, 0x0102030405060708);
        assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(get(&b, w), 0x0102030405060708);
        assert_eq!(get(&b[..9], w), 0x0100_0000_0000_0000, "bytes past the end read as zero");
        assert_eq!(get(&b[..0], f), 0);
        assert_eq!(get(&b, w.at_byte(8)), 0);
        let odd = Field { off: 3, width: 64 };
        set(&mut b, odd, u64::MAX - 5);
        assert_eq!(get(&b, odd), u64::MAX - 5);
    }

    #[test]
    fn fast_paths_match_the_bit_path() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for off in (0..64u32).step_by(8).chain(1..8).chain([13, 21]) {
            for width in (8..=64u32).step_by(8).chain(1..32) {
                let f = Field { off, width };
                x = x.rotate_left(17).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                let (mut a, mut b) = ([0x5Au8; 24], [0x5Au8; 24]);
                set(&mut a, f, x);
                set_bits(&mut b, f, x);
                assert_eq!(a, b, "set {f:?}");
                assert_eq!(get(&a, f), get_bits(&a, f), "get {f:?}");
                let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
                assert_eq!(get(&a, f), x & mask);
            }
        }
    }

    #[test]
    fn in_be64_places_a_field_as_set_does() {
        for (off, width) in [(0, 8), (8, 16), (24, 8), (32, 24), (58, 6), (64, 8), (88, 8), (96, 32), (64, 64), (3, 13)] {
            let f = Field { off, width };
            let word = (off / 64 * 8) as usize;
            let mut b = [0u8; 16];
            set(&mut b, f, 0xA5C3_5A3C_9696_F00F);
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[word..word + 8]);
            assert_eq!(in_be64(f, word, 0xA5C3_5A3C_9696_F00F), u64::from_be_bytes(w), "{f:?}");
        }
    }

    #[test]
    fn dw_notation() {
        assert_eq!(dw(0x00, 31, 16), Field { off: 0, width: 16 });
        assert_eq!(dw(0x0c, 28, 24), Field { off: 99, width: 5 });
    }
}
