//! Boot information from either loader, reduced to what the kernel needs: the RAM map,
//! the command line and the ACPI RSDP.
//!
//! Layouts (declared once, below, as offset tables):
//! - PVH `struct hvm_start_info` and `hvm_memmap_table_entry` (Xen
//!   `xen/include/public/arch-x86/hvm/start_info.h`, version 1).
//! - Multiboot2 boot information (Multiboot2 spec §3.6): fixed 8-byte part, then tags
//!   (type u32, size u32) padded to 8 bytes; tag 1 command line, tag 6 memory map,
//!   tag 14/15 ACPI old/new RSDP (a copy of the RSDP), tag 8 framebuffer info ("EGA text":
//!   the VGA text console; "RGB": the framebuffer console).
//!
//! Parsing reads physical memory through [`PhysRead`] so that it is unit tested on the host.
use core::fmt;

/// Read-only access to physical memory (identity-mapped on the machine; a buffer in tests).
pub trait PhysRead {
    /// Copy `buf.len()` bytes at physical address `pa`; false if out of range.
    fn read(&self, pa: u64, buf: &mut [u8]) -> bool;
    fn u32(&self, pa: u64) -> Option<u32> {
        let mut b = [0; 4];
        self.read(pa, &mut b).then(|| u32::from_le_bytes(b))
    }
    fn u64(&self, pa: u64) -> Option<u64> {
        let mut b = [0; 8];
        self.read(pa, &mut b).then(|| u64::from_le_bytes(b))
    }
}

/// PVH `hvm_start_info` field offsets (start_info.h).
mod pvh {
    pub const MAGIC: u32 = 0x336e_c578;
    pub const OFF_MAGIC: u64 = 0;
    pub const OFF_VERSION: u64 = 4;
    pub const OFF_NR_MODULES: u64 = 12;
    pub const OFF_MODLIST_PADDR: u64 = 16;
    pub const OFF_CMDLINE_PADDR: u64 = 24;
    pub const OFF_RSDP_PADDR: u64 = 32;
    pub const OFF_MEMMAP_PADDR: u64 = 40;
    pub const OFF_MEMMAP_ENTRIES: u64 = 48;
    /// `hvm_memmap_table_entry`: addr u64 @0, size u64 @8, type u32 @16, reserved u32 @20.
    pub const MEMMAP_ENTRY_SIZE: u64 = 24;
    /// `hvm_modlist_entry`: paddr u64 @0, size u64 @8, cmdline_paddr u64 @16, reserved u64 @24.
    pub const MODLIST_PADDR: u64 = 0;
    pub const MODLIST_SIZE: u64 = 8;
}

/// Multiboot2 information layout (Multiboot2 spec §3.6).
mod mb2 {
    pub const TAG_END: u32 = 0;
    pub const TAG_CMDLINE: u32 = 1;
    /// Module tag: mod_start u32 @8, mod_end u32 @12, then its string.
    pub const TAG_MODULE: u32 = 3;
    pub const MOD_START: u64 = 8;
    pub const MOD_END: u64 = 12;
    pub const TAG_MMAP: u32 = 6;
    pub const TAG_ACPI_OLD: u32 = 14;
    pub const TAG_ACPI_NEW: u32 = 15;
    pub const TAG_FRAMEBUFFER: u32 = 8;
    /// Framebuffer tag: addr u64 @8, pitch u32 @16, width u32 @20, height u32 @24, bpp u8 @28,
    /// type u8 @29 (0 indexed, 1 RGB, 2 EGA text: width/height in characters).
    pub const FB_ADDR: u64 = 8;
    pub const FB_PITCH: u64 = 16;
    pub const FB_WIDTH: u64 = 20;
    pub const FB_HEIGHT: u64 = 24;
    /// bpp u8 @28 and type u8 @29, read together.
    pub const FB_BPP: u64 = 28;
    pub const FB_TYPE_RGB: u8 = 1;
    pub const FB_TYPE_EGA_TEXT: u8 = 2;
    /// RGB colour info after a u16 reserved (GRUB's multiboot2.h): red position u8, red mask
    /// size u8, then green, then blue.
    pub const FB_RGB: u64 = 32;
    pub const FB_RGB_SIZE: u32 = 38;
    /// Smallest framebuffer tag holding the fields above.
    pub const FB_MIN_SIZE: u32 = 30;
    /// Fixed part: total_size u32, reserved u32.
    pub const FIXED: u64 = 8;
    /// Tag header: type u32, size u32.
    pub const TAG_HEADER: u64 = 8;
    /// Memory map tag: entry_size u32 @8, entry_version u32 @12, entries @16
    /// (base u64 @0, length u64 @8, type u32 @16).
    pub const MMAP_ENTRIES: u64 = 16;
    pub const MAX_TOTAL: u32 = 1 << 20;
}

/// E820 / Multiboot2 memory type "available RAM".
pub const MEM_TYPE_RAM: u32 = 1;
/// E820 / Multiboot2 "ACPI reclaimable".
pub const MEM_TYPE_ACPI: u32 = 3;
/// Most memory-map entries kept.
pub const MAX_REGIONS: usize = 64;
/// Longest command line kept (longer ones are an error, not silently cut).
pub const MAX_CMDLINE: usize = 1024;
/// The largest boot module the image copies (a configuration file: nvmetcli's JSON).
pub const MAX_MODULE: usize = 64 * 1024;

/// One memory-map entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Region {
    pub start: u64,
    pub len: u64,
    pub kind: u32,
}

impl Region {
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.len)
    }
}

/// Which loader entered the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Pvh,
    Multiboot2,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Pvh => "PVH",
            Protocol::Multiboot2 => "Multiboot2",
        }
    }
}

/// Why the boot information could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootInfoError {
    UnknownProtocol(u64),
    BadPvhMagic(u32),
    Unreadable(u64),
    NoMemoryMap,
    CmdlineTooLong,
    CmdlineNotUtf8,
    BadTag { offset: u64, size: u32 },
    /// A boot module larger than the image keeps ([`MAX_MODULE`] bytes).
    ModuleTooLarge(u64),
    /// A boot module the loader placed where it cannot be read.
    ModuleUnreadable(u64),
}

impl fmt::Display for BootInfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownProtocol(m) => write!(f, "entered with unknown boot magic {m:#x}"),
            Self::BadPvhMagic(m) => write!(f, "PVH start_info magic {m:#x} is not 0x336ec578"),
            Self::Unreadable(pa) => write!(f, "boot information at {pa:#x} unreadable"),
            Self::NoMemoryMap => write!(f, "the loader gave no memory map"),
            Self::CmdlineTooLong => write!(f, "command line longer than {MAX_CMDLINE} bytes"),
            Self::CmdlineNotUtf8 => write!(f, "command line is not UTF-8"),
            Self::ModuleTooLarge(n) => write!(f, "boot module of {n} bytes is larger than {MAX_MODULE}"),
            Self::ModuleUnreadable(pa) => write!(f, "boot module at {pa:#x} unreadable"),
            Self::BadTag { offset, size } => {
                write!(f, "malformed Multiboot2 tag at +{offset:#x} (size {size})")
            }
        }
    }
}

/// Parsed boot information; strings and the RSDP are copied into the caller's buffers.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub protocol: Protocol,
    pub regions: heapless::Vec<Region, MAX_REGIONS>,
    pub cmdline_len: usize,
    /// Physical address of the RSDP given by the loader (PVH), if any.
    pub rsdp_paddr: Option<u64>,
    /// Length of the RSDP copy placed in the caller's buffer (Multiboot2 tags 14/15), 0 if none.
    pub rsdp_copy_len: usize,
    /// The text screen to print on: Multiboot2's framebuffer tag when it reports EGA text,
    /// the PC default for PVH (VMMs that use PVH leave the firmware's text mode).
    pub text: Option<crate::vga::TextMode>,
    /// The linear framebuffer to draw the console on (Multiboot2 framebuffer tag of type RGB).
    pub frame: Option<crate::fbcon::FrameMode>,
    /// The first boot module (QEMU `-initrd`, a GRUB `module2` line): where the loader put it.
    pub module: Option<Module>,
}

/// A boot module's place in physical memory, as the loader reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Module {
    pub paddr: u64,
    pub len: u64,
}

fn read_cstr(mem: &dyn PhysRead, pa: u64, out: &mut [u8]) -> Result<usize, BootInfoError> {
    let mut n = 0;
    loop {
        let mut b = [0u8; 1];
        if !mem.read(pa + n as u64, &mut b) {
            return Err(BootInfoError::Unreadable(pa));
        }
        if b[0] == 0 {
            break;
        }
        if n == out.len() {
            return Err(BootInfoError::CmdlineTooLong);
        }
        out[n] = b[0];
        n += 1;
    }
    core::str::from_utf8(&out[..n]).map_err(|_| BootInfoError::CmdlineNotUtf8)?;
    Ok(n)
}

/// Parse the boot information left by the loader identified by `magic`.
pub fn parse(
    mem: &dyn PhysRead,
    info: u64,
    magic: u64,
    cmdline: &mut [u8],
    rsdp_copy: &mut [u8],
) -> Result<Parsed, BootInfoError> {
    if magic == boot::PROTOCOL_PVH {
        parse_pvh(mem, info, cmdline)
    } else if magic == boot::MULTIBOOT2_BOOTLOADER_MAGIC {
        parse_multiboot2(mem, info, cmdline, rsdp_copy)
    } else {
        Err(BootInfoError::UnknownProtocol(magic))
    }
}

fn parse_pvh(mem: &dyn PhysRead, si: u64, cmdline: &mut [u8]) -> Result<Parsed, BootInfoError> {
    let rd32 = |o| mem.u32(si + o).ok_or(BootInfoError::Unreadable(si + o));
    let rd64 = |o| mem.u64(si + o).ok_or(BootInfoError::Unreadable(si + o));
    let magic = rd32(pvh::OFF_MAGIC)?;
    if magic != pvh::MAGIC {
        return Err(BootInfoError::BadPvhMagic(magic));
    }
    if rd32(pvh::OFF_VERSION)? < 1 {
        return Err(BootInfoError::NoMemoryMap);
    }
    let mut regions = heapless::Vec::new();
    let map = rd64(pvh::OFF_MEMMAP_PADDR)?;
    let n = rd32(pvh::OFF_MEMMAP_ENTRIES)? as u64;
    if map == 0 || n == 0 {
        return Err(BootInfoError::NoMemoryMap);
    }
    for i in 0..n.min(MAX_REGIONS as u64) {
        let e = map + i * pvh::MEMMAP_ENTRY_SIZE;
        let start = mem.u64(e).ok_or(BootInfoError::Unreadable(e))?;
        let len = mem.u64(e + 8).ok_or(BootInfoError::Unreadable(e))?;
        let kind = mem.u32(e + 16).ok_or(BootInfoError::Unreadable(e))?;
        let _ = regions.push(Region { start, len, kind });
    }
    let cl = rd64(pvh::OFF_CMDLINE_PADDR)?;
    let cmdline_len = if cl != 0 { read_cstr(mem, cl, cmdline)? } else { 0 };
    let rsdp = rd64(pvh::OFF_RSDP_PADDR)?;
    let module = if rd32(pvh::OFF_NR_MODULES)? > 0 {
        let list = rd64(pvh::OFF_MODLIST_PADDR)?;
        let paddr = mem.u64(list + pvh::MODLIST_PADDR).ok_or(BootInfoError::Unreadable(list))?;
        let len = mem.u64(list + pvh::MODLIST_SIZE).ok_or(BootInfoError::Unreadable(list))?;
        Some(Module { paddr, len })
    } else {
        None
    };
    Ok(Parsed {
        protocol: Protocol::Pvh,
        regions,
        cmdline_len,
        rsdp_paddr: (rsdp != 0).then_some(rsdp),
        rsdp_copy_len: 0,
        text: Some(crate::vga::TextMode::PC),
        frame: None,
        module,
    })
}

fn parse_multiboot2(
    mem: &dyn PhysRead,
    info: u64,
    cmdline: &mut [u8],
    rsdp_copy: &mut [u8],
) -> Result<Parsed, BootInfoError> {
    let total = mem.u32(info).ok_or(BootInfoError::Unreadable(info))?;
    if total < mb2::FIXED as u32 || total > mb2::MAX_TOTAL {
        return Err(BootInfoError::BadTag { offset: 0, size: total });
    }
    let mut regions = heapless::Vec::new();
    let mut cmdline_len = 0;
    let mut rsdp_copy_len = 0;
    let mut have_new_rsdp = false;
    let mut text = None;
    let mut frame = None;
    let mut module = None;
    let mut off = mb2::FIXED;
    while off + mb2::TAG_HEADER <= total as u64 {
        let tag = info + off;
        let ty = mem.u32(tag).ok_or(BootInfoError::Unreadable(tag))?;
        let size = mem.u32(tag + 4).ok_or(BootInfoError::Unreadable(tag))?;
        if ty == mb2::TAG_END {
            break;
        }
        if (size as u64) < mb2::TAG_HEADER || off + size as u64 > total as u64 {
            return Err(BootInfoError::BadTag { offset: off, size });
        }
        match ty {
            mb2::TAG_CMDLINE => cmdline_len = read_cstr(mem, tag + mb2::TAG_HEADER, cmdline)?,
            mb2::TAG_MODULE if module.is_none() && size as u64 >= mb2::MOD_END + 4 => {
                let start = mem.u32(tag + mb2::MOD_START).ok_or(BootInfoError::Unreadable(tag))?;
                let end = mem.u32(tag + mb2::MOD_END).ok_or(BootInfoError::Unreadable(tag))?;
                let len = end.checked_sub(start).ok_or(BootInfoError::BadTag { offset: off, size })?;
                module = Some(Module { paddr: start as u64, len: len as u64 });
            }
            mb2::TAG_MMAP => {
                let esize = mem.u32(tag + 8).ok_or(BootInfoError::Unreadable(tag))? as u64;
                if esize < 20 {
                    return Err(BootInfoError::BadTag { offset: off, size });
                }
                let mut e = tag + mb2::MMAP_ENTRIES;
                while e + esize <= tag + size as u64 {
                    let start = mem.u64(e).ok_or(BootInfoError::Unreadable(e))?;
                    let len = mem.u64(e + 8).ok_or(BootInfoError::Unreadable(e))?;
                    let kind = mem.u32(e + 16).ok_or(BootInfoError::Unreadable(e))?;
                    let _ = regions.push(Region { start, len, kind });
                    e += esize;
                }
            }
            mb2::TAG_ACPI_OLD | mb2::TAG_ACPI_NEW if !(have_new_rsdp && ty == mb2::TAG_ACPI_OLD) => {
                let n = ((size as u64 - mb2::TAG_HEADER) as usize).min(rsdp_copy.len());
                if !mem.read(tag + mb2::TAG_HEADER, &mut rsdp_copy[..n]) {
                    return Err(BootInfoError::Unreadable(tag));
                }
                rsdp_copy_len = n;
                have_new_rsdp |= ty == mb2::TAG_ACPI_NEW;
            }
            mb2::TAG_FRAMEBUFFER if size >= mb2::FB_MIN_SIZE => {
                let mut ty = [0u8; 2];
                if !mem.read(tag + mb2::FB_BPP, &mut ty) {
                    return Err(BootInfoError::Unreadable(tag));
                }
                let field = |o: u64| mem.u32(tag + o).ok_or(BootInfoError::Unreadable(tag));
                let mut rgb = [0u8; 6];
                if ty[1] == mb2::FB_TYPE_RGB && size >= mb2::FB_RGB_SIZE && mem.read(tag + mb2::FB_RGB, &mut rgb) && rgb[1] == 8 && rgb[3] == 8 && rgb[5] == 8 {
                    frame = Some(crate::fbcon::FrameMode {
                        addr: mem.u64(tag + mb2::FB_ADDR).ok_or(BootInfoError::Unreadable(tag))?,
                        pitch: field(mb2::FB_PITCH)?,
                        width: field(mb2::FB_WIDTH)?,
                        height: field(mb2::FB_HEIGHT)?,
                        bpp: ty[0],
                        red: rgb[0],
                        green: rgb[2],
                        blue: rgb[4],
                    });
                }
                if ty[1] == mb2::FB_TYPE_EGA_TEXT {
                    text = Some(crate::vga::TextMode {
                        addr: mem.u64(tag + mb2::FB_ADDR).ok_or(BootInfoError::Unreadable(tag))?,
                        pitch: field(mb2::FB_PITCH)?,
                        cols: field(mb2::FB_WIDTH)?,
                        rows: field(mb2::FB_HEIGHT)?,
                    });
                }
            }
            _ => {}
        }
        off += (size as u64 + 7) & !7;
    }
    if regions.is_empty() {
        return Err(BootInfoError::NoMemoryMap);
    }
    Ok(Parsed { protocol: Protocol::Multiboot2, regions, cmdline_len, rsdp_paddr: None, rsdp_copy_len, text, frame, module })
}

/// Drop a leading image path (GRUB passes `/boot/appliance key=value ...` on some versions).
pub fn strip_image_path(cmdline: &str) -> &str {
    let t = cmdline.trim_start();
    match t.split_once(char::is_whitespace) {
        Some((first, rest)) if first.starts_with('/') && !first.contains('=') => rest.trim_start(),
        None if t.starts_with('/') && !t.contains('=') => "",
        _ => t,
    }
}

// ---- the machine side: identity-mapped memory and the copies kept in the image ----

/// Kernel copies of the loader's data (the loader's memory becomes free RAM).
pub struct BootData {
    pub protocol: Protocol,
    pub regions: heapless::Vec<Region, MAX_REGIONS>,
    pub cmdline: &'static str,
    /// The text screen the loader left, if any (see [`Parsed::text`]).
    pub text: Option<crate::vga::TextMode>,
    /// The framebuffer the loader set up, if any (see [`Parsed::frame`]).
    pub frame: Option<crate::fbcon::FrameMode>,
    /// A copy of the first boot module (the loader's memory becomes free RAM), if there was one.
    pub module: Option<&'static [u8]>,
}

/// Where the boot module is copied, once, before memory is handed to the allocators.
#[cfg_attr(not(target_os = "none"), allow(dead_code))]
static MODULE: spin::Mutex<[u8; MAX_MODULE]> = spin::Mutex::new([0; MAX_MODULE]);

/// Copy `m` out of the loader's memory while it is still untouched.
#[cfg_attr(not(target_os = "none"), allow(dead_code))]
fn copy_module(mem: &dyn PhysRead, m: Module, buf: &mut [u8; MAX_MODULE]) -> Result<usize, BootInfoError> {
    let len = usize::try_from(m.len).ok().filter(|&n| n <= MAX_MODULE).ok_or(BootInfoError::ModuleTooLarge(m.len))?;
    if !mem.read(m.paddr, &mut buf[..len]) {
        return Err(BootInfoError::ModuleUnreadable(m.paddr));
    }
    Ok(len)
}

#[cfg_attr(not(target_os = "none"), allow(dead_code))]
static CMDLINE: spin::Once<heapless::String<MAX_CMDLINE>> = spin::Once::new();
static RSDP: spin::Once<Option<u64>> = spin::Once::new();

/// RSDP copy from Multiboot2 (16-byte aligned as ACPI requires for the BIOS-area scan).
#[cfg_attr(not(target_os = "none"), allow(dead_code))]
#[repr(C, align(16))]
struct RsdpCopy([u8; 64]);
#[cfg_attr(not(target_os = "none"), allow(dead_code))]
static RSDP_COPY: spin::Mutex<RsdpCopy> = spin::Mutex::new(RsdpCopy([0; 64]));

/// The RSDP's physical address from the loader, if it gave one.
pub fn rsdp() -> Option<u64> {
    RSDP.get().copied().flatten()
}

/// Reads identity-mapped physical memory below 4 GiB (the early page tables' reach).
#[cfg(target_os = "none")]
struct Identity;

#[cfg(target_os = "none")]
impl PhysRead for Identity {
    fn read(&self, pa: u64, buf: &mut [u8]) -> bool {
        if pa == 0 || pa.saturating_add(buf.len() as u64) > (4u64 << 30) {
            return false;
        }
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: below 4 GiB everything is identity-mapped by the boot tables; the loader
            // placed its information there and nothing else writes it yet.
            *b = unsafe { ((pa + i as u64) as *const u8).read_volatile() };
        }
        true
    }
}

/// Parse the loader's information (identity-mapped) into kernel copies.
#[cfg(target_os = "none")]
pub fn parse_from_boot(info: u64, magic: u64) -> Result<BootData, BootInfoError> {
    let mut cl = [0u8; MAX_CMDLINE];
    let mut copy = RSDP_COPY.lock();
    let p = parse(&Identity, info, magic, &mut cl, &mut copy.0)?;
    let s = core::str::from_utf8(&cl[..p.cmdline_len]).map_err(|_| BootInfoError::CmdlineNotUtf8)?;
    let mut hs = heapless::String::new();
    let _ = hs.push_str(strip_image_path(s));
    let cmdline = CMDLINE.call_once(|| hs).as_str();
    let rsdp = if p.rsdp_copy_len > 0 { Some(copy.0.as_ptr() as u64) } else { p.rsdp_paddr };
    RSDP.call_once(|| rsdp);
    let module = match p.module {
        Some(m) => {
            // Taken once for the image's life: the copy stays readable as long as the image runs.
            let buf: &'static mut [u8; MAX_MODULE] = spin::MutexGuard::leak(MODULE.try_lock().ok_or(BootInfoError::ModuleUnreadable(m.paddr))?);
            let n = copy_module(&Identity, m, buf)?;
            Some(&buf[..n])
        }
        None => None,
    };
    Ok(BootData { protocol: p.protocol, regions: p.regions, cmdline, text: p.text, frame: p.frame, module })
}

#[cfg(not(target_os = "none"))]
pub fn parse_from_boot(_info: u64, _magic: u64) -> Result<BootData, BootInfoError> {
    Err(BootInfoError::NoMemoryMap)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Buf(u64, Vec<u8>);
    impl PhysRead for Buf {
        fn read(&self, pa: u64, buf: &mut [u8]) -> bool {
            let Some(o) = pa.checked_sub(self.0) else { return false };
            let o = o as usize;
            match self.1.get(o..o + buf.len()) {
                Some(s) => {
                    buf.copy_from_slice(s);
                    true
                }
                None => false,
            }
        }
    }
    fn put32(v: &mut [u8], o: usize, x: u32) {
        v[o..o + 4].copy_from_slice(&x.to_le_bytes());
    }
    fn put64(v: &mut [u8], o: usize, x: u64) {
        v[o..o + 8].copy_from_slice(&x.to_le_bytes());
    }

    #[test]
    fn pvh_start_info() {
        let base = 0x1000;
        let mut m = vec![0u8; 0x400];
        put32(&mut m, 0, pvh::MAGIC);
        put32(&mut m, 4, 1);
        put64(&mut m, 24, base + 0x200);
        put64(&mut m, 32, 0xf5a40);
        put64(&mut m, 40, base + 0x100);
        put32(&mut m, 48, 2);
        put64(&mut m, 0x100, 0);
        put64(&mut m, 0x108, 0x9fc00);
        put32(&mut m, 0x110, 1);
        put64(&mut m, 0x118, 0x100000);
        put64(&mut m, 0x120, 0x1fee0000);
        put32(&mut m, 0x128, 1);
        m[0x200..0x20b].copy_from_slice(b"exit=halt\0\0");
        let mut cl = [0u8; 64];
        let p = parse(&Buf(base, m), base, boot::PROTOCOL_PVH, &mut cl, &mut [0; 64]).unwrap();
        assert_eq!(p.protocol, Protocol::Pvh);
        assert_eq!(p.regions.len(), 2);
        assert_eq!(p.regions[1], Region { start: 0x100000, len: 0x1fee0000, kind: 1 });
        assert_eq!(&cl[..p.cmdline_len], b"exit=halt");
        assert_eq!(p.rsdp_paddr, Some(0xf5a40));
    }

    #[test]
    fn pvh_bad_magic_and_cmdline_too_long() {
        let mut m = vec![0u8; 0x400];
        put32(&mut m, 0, 0x1234);
        let e = parse(&Buf(0, m.clone()), 0, boot::PROTOCOL_PVH, &mut [0; 8], &mut [0; 8]);
        assert_eq!(e.unwrap_err(), BootInfoError::BadPvhMagic(0x1234));
        put32(&mut m, 0, pvh::MAGIC);
        put32(&mut m, 4, 1);
        put64(&mut m, 24, 0x200);
        put64(&mut m, 40, 0x100);
        put32(&mut m, 48, 1);
        m[0x200..0x210].copy_from_slice(b"0123456789abcdef");
        let e = parse(&Buf(0, m), 0, boot::PROTOCOL_PVH, &mut [0; 8], &mut [0; 8]);
        assert_eq!(e.unwrap_err(), BootInfoError::CmdlineTooLong);
    }

    #[test]
    fn multiboot2_tags() {
        let base = 0x10000u64;
        let mut m = vec![0u8; 0x200];
        let mut o = 8;
        // cmdline tag
        put32(&mut m, o, 1);
        put32(&mut m, o + 4, 8 + 12);
        m[o + 8..o + 20].copy_from_slice(b"/boot/a ns=1");
        o += 24;
        // mmap tag with 2 entries of 24 bytes
        put32(&mut m, o, 6);
        put32(&mut m, o + 4, 16 + 48);
        put32(&mut m, o + 8, 24);
        put64(&mut m, o + 16, 0x100000);
        put64(&mut m, o + 24, 0x7ee0000);
        put32(&mut m, o + 32, 1);
        put64(&mut m, o + 40, 0xfeffc000);
        put64(&mut m, o + 48, 0x4000);
        put32(&mut m, o + 56, 2);
        o += 64;
        // ACPI old RSDP tag (20 bytes)
        put32(&mut m, o, 14);
        put32(&mut m, o + 4, 8 + 20);
        m[o + 8..o + 16].copy_from_slice(b"RSD PTR ");
        o += 32;
        // framebuffer tag, EGA text 80 x 25 at 0xb8000 (GRUB's BIOS text mode)
        put32(&mut m, o, 8);
        put32(&mut m, o + 4, 32);
        put64(&mut m, o + 8, 0xb8000);
        put32(&mut m, o + 16, 160);
        put32(&mut m, o + 20, 80);
        put32(&mut m, o + 24, 25);
        m[o + 28] = 16;
        m[o + 29] = 2;
        o += 32;
        put32(&mut m, o, 0);
        put32(&mut m, o + 4, 8);
        o += 8;
        put32(&mut m, 0, o as u32);
        let mut cl = [0u8; 64];
        let mut rs = [0u8; 64];
        let p = parse(&Buf(base, m.clone()), base, boot::MULTIBOOT2_BOOTLOADER_MAGIC, &mut cl, &mut rs).unwrap();
        assert_eq!(p.text, Some(crate::vga::TextMode::PC));
        assert_eq!(p.frame, None);
        // The same tag reporting an RGB framebuffer (UEFI GOP; tag size 32 has no colour info,
        // so nothing), then with colour info in the 8 bytes after it (size 40): the frame.
        let t = o - 8 - 32;
        m[t + 28] = 32;
        m[t + 29] = 1;
        let p = parse(&Buf(base, m.clone()), base, boot::MULTIBOOT2_BOOTLOADER_MAGIC, &mut cl, &mut rs).unwrap();
        assert_eq!((p.text, p.frame), (None, None));
        let mut m2 = m[..t + 32].to_vec();
        m2.extend_from_slice(&[16, 8, 8, 8, 0, 8, 0, 0]);
        m2.extend_from_slice(&m[t + 32..]);
        put32(&mut m2, t + 4, 40);
        put32(&mut m2, 0, (o + 8) as u32);
        let p = parse(&Buf(base, m2), base, boot::MULTIBOOT2_BOOTLOADER_MAGIC, &mut cl, &mut rs).unwrap();
        assert_eq!(p.text, None);
        assert_eq!(p.frame, Some(crate::fbcon::FrameMode { addr: 0xb8000, pitch: 160, width: 80, height: 25, bpp: 32, red: 16, green: 8, blue: 0 }));
        assert_eq!(p.regions.len(), 2);
        assert_eq!(p.regions[1].kind, 2);
        assert_eq!(strip_image_path(core::str::from_utf8(&cl[..p.cmdline_len]).unwrap()), "ns=1");
        assert_eq!(p.rsdp_copy_len, 20);
        assert_eq!(&rs[..8], b"RSD PTR ");
    }

    #[test]
    fn multiboot2_bad_tag_size() {
        let mut m = vec![0u8; 64];
        put32(&mut m, 0, 32);
        put32(&mut m, 8, 6);
        put32(&mut m, 12, 100);
        let e = parse(&Buf(0x1000, m), 0x1000, boot::MULTIBOOT2_BOOTLOADER_MAGIC, &mut [0; 8], &mut [0; 8]);
        assert_eq!(e.unwrap_err(), BootInfoError::BadTag { offset: 8, size: 100 });
    }

    #[test]
    fn image_path_stripped_only_when_a_path() {
        assert_eq!(strip_image_path("/boot/appliance exit=halt"), "exit=halt");
        assert_eq!(strip_image_path("/boot/appliance"), "");
        assert_eq!(strip_image_path("exit=halt log=debug"), "exit=halt log=debug");
        assert_eq!(strip_image_path(""), "");
    }
}
