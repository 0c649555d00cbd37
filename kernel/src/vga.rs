//! VGA text console: every console line also goes to a text-mode screen (a server's monitor
//! or its BMC's remote console), scrolling at the bottom, with the hardware cursor after the
//! last character. Enabled by [`enable`] with the mode the loader reports (Multiboot2
//! framebuffer tag of type "EGA text"; the PC default 0xB8000, 80 x 25 for PVH). A UEFI boot
//! leaves the display in a graphics mode and reports no text mode: then only serial prints.
use spin::Mutex;

/// A text mode: cell array address and geometry (each cell = character byte + attribute byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextMode {
    pub addr: u64,
    pub cols: u32,
    pub rows: u32,
    /// Bytes per row.
    pub pitch: u32,
}

impl TextMode {
    /// The PC's colour text mode 3: 80 x 25 at 0xB8000 (IBM VGA; what BIOS leaves set up).
    pub const PC: TextMode = TextMode { addr: 0xb8000, cols: 80, rows: 25, pitch: 160 };
}

/// Light grey on black.
const ATTR: u8 = 0x07;
/// CRT controller index/data ports (colour mode), cursor location registers 0x0E/0x0F.
const CRTC_INDEX: u16 = 0x3d4;
const CRTC_DATA: u16 = 0x3d5;
const CURSOR_HIGH: u8 = 0x0e;
const CURSOR_LOW: u8 = 0x0f;

struct Screen {
    mode: TextMode,
    col: u32,
    row: u32,
}

static SCREEN: Mutex<Option<Screen>> = Mutex::new(None);

/// Whether a reported mode is one this console drives: the cells lie in the legacy VGA window
/// (0xA0000..0xC0000, identity-mapped with the first 2 MiB) and the geometry is sane.
fn usable(m: &TextMode) -> bool {
    let bytes = u64::from(m.pitch) * u64::from(m.rows);
    (1..=255).contains(&m.cols)
        && (1..=255).contains(&m.rows)
        && m.pitch >= m.cols * 2
        && m.addr >= 0xa0000
        && m.addr.checked_add(bytes).is_some_and(|end| end <= 0xc0000)
}

/// Start printing to the text screen `m` (cleared first). An unusable mode is ignored.
pub fn enable(m: TextMode) {
    if !usable(&m) {
        return;
    }
    let mut s = Screen { mode: m, col: 0, row: 0 };
    for r in 0..m.rows {
        s.clear_row(r);
    }
    s.cursor();
    *SCREEN.lock() = Some(s);
}

/// Whether a text screen is being written.
pub fn enabled() -> bool {
    SCREEN.lock().is_some()
}

impl Screen {
    fn cell(&self, col: u32, row: u32) -> *mut u16 {
        (self.mode.addr + u64::from(row) * u64::from(self.mode.pitch) + u64::from(col) * 2) as *mut u16
    }
    fn set(&mut self, col: u32, row: u32, v: u16) {
        // SAFETY: col < cols and row < rows (callers), so the cell lies inside the mode's
        // array, which `usable` placed in the identity-mapped legacy VGA window.
        unsafe { core::ptr::write_volatile(self.cell(col, row), v) };
    }
    fn get(&self, col: u32, row: u32) -> u16 {
        // SAFETY: as in `set`.
        unsafe { core::ptr::read_volatile(self.cell(col, row)) }
    }
    fn clear_row(&mut self, row: u32) {
        for c in 0..self.mode.cols {
            self.set(c, row, u16::from(ATTR) << 8 | u16::from(b' '));
        }
    }
    fn newline(&mut self) {
        self.col = 0;
        if self.row + 1 < self.mode.rows {
            self.row += 1;
            return;
        }
        for r in 1..self.mode.rows {
            for c in 0..self.mode.cols {
                let v = self.get(c, r);
                self.set(c, r - 1, v);
            }
        }
        self.clear_row(self.mode.rows - 1);
    }
    fn put(&mut self, ch: char) {
        match ch {
            '\n' => self.newline(),
            '\r' => self.col = 0,
            _ => {
                if self.col >= self.mode.cols {
                    self.newline();
                }
                // Printable ASCII as is; anything else as code page 437's small square.
                let b = if ch.is_ascii_graphic() || ch == ' ' { ch as u8 } else { 0xfe };
                self.set(self.col, self.row, u16::from(ATTR) << 8 | u16::from(b));
                self.col += 1;
            }
        }
    }
    /// Move the blinking cursor to the next write position.
    fn cursor(&self) {
        use x86_64::instructions::port::Port;
        let pos = (self.row * self.mode.cols + self.col.min(self.mode.cols - 1)) as u16;
        let mut index: Port<u8> = Port::new(CRTC_INDEX);
        let mut data: Port<u8> = Port::new(CRTC_DATA);
        // SAFETY: the VGA CRT controller's cursor location registers; writing them only moves
        // the cursor (ports absent without a VGA: the writes go nowhere).
        unsafe {
            index.write(CURSOR_HIGH);
            data.write((pos >> 8) as u8);
            index.write(CURSOR_LOW);
            data.write(pos as u8);
        }
    }
}

impl core::fmt::Write for Screen {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for ch in s.chars() {
            self.put(ch);
        }
        Ok(())
    }
}

/// Write to the screen, if enabled. `try_only`: do not wait for the lock (exception paths).
pub fn write_fmt(args: core::fmt::Arguments, try_only: bool) {
    use core::fmt::Write as _;
    let guard = if try_only { SCREEN.try_lock() } else { Some(SCREEN.lock()) };
    if let Some(mut g) = guard {
        if let Some(s) = g.as_mut() {
            let _ = s.write_fmt(args);
            s.cursor();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_modes() {
        assert!(usable(&TextMode::PC));
        assert!(usable(&TextMode { addr: 0xb8000, cols: 80, rows: 50, pitch: 160 }));
        // Outside the VGA window, or running past it, or nonsense geometry: refused.
        assert!(!usable(&TextMode { addr: 0xfd00_0000, cols: 80, rows: 25, pitch: 160 }));
        assert!(!usable(&TextMode { addr: 0xbf800, cols: 80, rows: 25, pitch: 160 }));
        assert!(!usable(&TextMode { addr: 0xb8000, cols: 0, rows: 25, pitch: 160 }));
        assert!(!usable(&TextMode { addr: 0xb8000, cols: 80, rows: 25, pitch: 100 }));
        assert!(!usable(&TextMode { addr: u64::MAX - 10, cols: 80, rows: 25, pitch: 160 }));
    }
}
