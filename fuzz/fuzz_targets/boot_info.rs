//! The loader's boot information into the kernel's parser (PVH start info or Multiboot2 tags,
//! as QEMU, GRUB or a PXE chain leaves them), then the command line it yields into the
//! NVMe-oF words' parser. The input is the memory image at the info address: byte 0 picks the
//! protocol, the rest is memory from 0x1000 on; reads past it fail as unmapped memory does.
//! Nothing may panic, and what the parser returns must lie within what it was given.
#![no_main]

use kernel::bootinfo::{parse, PhysRead, MAX_CMDLINE};

const BASE: u64 = 0x1000;

struct Image<'a>(&'a [u8]);
impl PhysRead for Image<'_> {
    fn read(&self, pa: u64, buf: &mut [u8]) -> bool {
        let Some(off) = pa.checked_sub(BASE).and_then(|o| usize::try_from(o).ok()) else { return false };
        match off.checked_add(buf.len()).and_then(|end| self.0.get(off..end)) {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&pick, mem)) = data.split_first() else { return };
    let magic = if pick & 1 == 0 { boot::PROTOCOL_PVH } else { boot::MULTIBOOT2_BOOTLOADER_MAGIC };
    let mut cmdline = [0u8; MAX_CMDLINE];
    let mut rsdp = [0u8; 64];
    let Ok(p) = parse(&Image(mem), BASE, magic, &mut cmdline, &mut rsdp) else { return };
    assert!(p.cmdline_len <= cmdline.len() && p.rsdp_copy_len <= rsdp.len());
    let line = core::str::from_utf8(&cmdline[..p.cmdline_len]).expect("parser returned a command line that is not UTF-8");
    let _ = nvmeof::cmdline::parse(kernel::bootinfo::strip_image_path(line));
});
