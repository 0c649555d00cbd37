//! Framebuffer console: every console line also drawn on a linear 32-bit framebuffer (what
//! GRUB passes under UEFI: the firmware's GOP mode, Multiboot2 framebuffer tag of type RGB),
//! 8 x 16-pixel cells (the public-domain 8 x 8 IBM PC glyphs of the `font8x8` crate, each row
//! drawn twice), light grey on black. No read-back (framebuffer reads are slow uncached
//! accesses): when the screen is full, writing continues at the top, and the row after the
//! current one is kept blank so the newest line is always the one above the gap.
use spin::Mutex;

/// A linear framebuffer as the loader describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameMode {
    pub addr: u64,
    /// Bytes per scan line.
    pub pitch: u32,
    pub width: u32,
    pub height: u32,
    /// Bits per pixel (24 and 32 are drawn).
    pub bpp: u8,
    /// Bit positions of the 8-bit red, green and blue fields in a pixel.
    pub red: u8,
    pub green: u8,
    pub blue: u8,
}

const CELL_W: u32 = 8;
const CELL_H: u32 = 16;
const FG: u8 = 0xaa;

struct Console {
    mode: FrameMode,
    cols: u32,
    rows: u32,
    col: u32,
    row: u32,
    fg: u32,
}

static CONSOLE: Mutex<Option<Console>> = Mutex::new(None);

/// Whether this console can draw on `m`: 24 or 32 bits per pixel, 8-bit colour fields, at least one
/// cell, and the whole framebuffer below 4 GiB (identity-mapped, uncached, from the first
/// instruction on; framebuffers above are not drawn).
fn usable(m: &FrameMode) -> bool {
    let bytes = u64::from(m.pitch) * u64::from(m.height);
    let bytes_pp = u64::from(m.bpp / 8);
    (m.bpp == 32 || m.bpp == 24)
        && [m.red, m.green, m.blue].iter().all(|&p| u32::from(p) + 8 <= u32::from(m.bpp))
        && m.width >= CELL_W
        && m.height >= CELL_H
        && u64::from(m.pitch) >= u64::from(m.width) * bytes_pp
        && m.addr != 0
        && m.addr.checked_add(bytes).is_some_and(|end| end <= 1 << 32)
}

/// Start drawing on `m` (cleared first). An unusable mode is ignored.
pub fn enable(m: FrameMode) {
    if !usable(&m) {
        return;
    }
    let mut c = Console {
        mode: m,
        cols: m.width / CELL_W,
        rows: m.height / CELL_H,
        col: 0,
        row: 0,
        fg: u32::from(FG) << m.red | u32::from(FG) << m.green | u32::from(FG) << m.blue,
    };
    for r in 0..c.rows {
        c.clear_row(r);
    }
    *CONSOLE.lock() = Some(c);
}

/// The size in characters, if drawing.
pub fn size() -> Option<(u32, u32)> {
    CONSOLE.lock().as_ref().map(|c| (c.cols, c.rows))
}

impl Console {
    fn pixel(&mut self, x: u32, y: u32, v: u32) {
        let bytes_pp = u64::from(self.mode.bpp / 8);
        let a = self.mode.addr + u64::from(y) * u64::from(self.mode.pitch) + u64::from(x) * bytes_pp;
        // SAFETY: x < width and y < height (cells lie inside cols x rows), so the pixel's
        // bytes are inside the framebuffer, which `usable` placed below 4 GiB where every
        // address is identity-mapped (uncached outside RAM).
        unsafe {
            if bytes_pp == 4 {
                core::ptr::write_volatile(a as *mut u32, v);
            } else {
                for (i, b) in v.to_le_bytes().iter().take(3).enumerate() {
                    core::ptr::write_volatile((a + i as u64) as *mut u8, *b);
                }
            }
        }
    }
    fn clear_row(&mut self, row: u32) {
        for y in row * CELL_H..(row + 1) * CELL_H {
            for x in 0..self.cols * CELL_W {
                self.pixel(x, y, 0);
            }
        }
    }
    fn glyph(&mut self, ch: char) {
        let g = font8x8::legacy::BASIC_LEGACY.get(ch as usize).copied().filter(|_| ch.is_ascii_graphic()).unwrap_or([0; 8]);
        let (x0, y0) = (self.col * CELL_W, self.row * CELL_H);
        for (i, bits) in g.iter().enumerate() {
            for dy in 0..2 {
                let y = y0 + i as u32 * 2 + dy;
                for b in 0..CELL_W {
                    // Bit 0 is the leftmost pixel in font8x8.
                    let v = if bits >> b & 1 == 1 { self.fg } else { 0 };
                    self.pixel(x0 + b, y, v);
                }
            }
        }
    }
    fn newline(&mut self) {
        self.col = 0;
        self.row = (self.row + 1) % self.rows;
        // Keep the row after the newest line blank (the "you are here" gap of a wrapped screen).
        let next = (self.row + 1) % self.rows;
        self.clear_row(self.row);
        if self.rows > 2 {
            self.clear_row(next);
        }
    }
    fn put(&mut self, ch: char) {
        match ch {
            '\n' => self.newline(),
            '\r' => self.col = 0,
            _ => {
                if self.col >= self.cols {
                    self.newline();
                }
                self.glyph(if ch.is_ascii() { ch } else { '?' });
                self.col += 1;
            }
        }
    }
}

impl core::fmt::Write for Console {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for ch in s.chars() {
            self.put(ch);
        }
        Ok(())
    }
}

/// Draw text, if enabled. `try_only`: do not wait for the lock (exception paths).
pub fn write_fmt(args: core::fmt::Arguments, try_only: bool) {
    use core::fmt::Write as _;
    let guard = if try_only { CONSOLE.try_lock() } else { Some(CONSOLE.lock()) };
    if let Some(mut g) = guard {
        if let Some(c) = g.as_mut() {
            let _ = c.write_fmt(args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOP: FrameMode = FrameMode { addr: 0x8000_0000, pitch: 5120, width: 1280, height: 800, bpp: 32, red: 16, green: 8, blue: 0 };

    #[test]
    fn usable_modes() {
        assert!(usable(&GOP));
        assert!(usable(&FrameMode { bpp: 24, pitch: 3840, ..GOP }));
        assert!(!usable(&FrameMode { bpp: 24, red: 24, ..GOP }));
        assert!(!usable(&FrameMode { bpp: 16, ..GOP }));
        assert!(!usable(&FrameMode { addr: 0x1_0000_0000, ..GOP }));
        assert!(!usable(&FrameMode { addr: 0xffff_f000, ..GOP }));
        assert!(!usable(&FrameMode { pitch: 1000, ..GOP }));
        assert!(!usable(&FrameMode { width: 4, ..GOP }));
        assert!(!usable(&FrameMode { red: 30, ..GOP }));
        assert!(!usable(&FrameMode { addr: u64::MAX - 4096, ..GOP }));
    }
}
