//! Memory keys: CREATE_MKEY for physically contiguous regions (MTT) and for fast registration, DESTROY_MKEY.

use super::*;

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    pub(super) fn next_variant(&mut self) -> u8 {
        self.mkey_variant = self.mkey_variant.wrapping_add(1);
        self.mkey_variant
    }

    pub(super) fn mkc_access(&mut self, base: Field, access: Access) {
        set(&mut self.inb, mkc::lr.at(base), 1);
        set(&mut self.inb, mkc::lw.at(base), access.local_write as u64);
        set(&mut self.inb, mkc::rr.at(base), access.remote_read as u64);
        set(&mut self.inb, mkc::rw.at(base), access.remote_write as u64);
    }

    /// Register `len` bytes of physically contiguous memory at `addr` in MTT mode (4 KiB
    /// translation entries, addressed by physical address). For per-I/O keys and bounded rkeys.
    pub fn reg_mr(&mut self, addr: PhysAddr, len: u64, access: Access) -> Result<Mkey, Error> {
        self.alive()?;
        let pd = self.pd.ok_or(Error::InvalidArgument("no PD"))?;
        if len == 0 {
            return Err(Error::InvalidArgument("empty registration"));
        }
        let first = addr & !(PAGE as u64 - 1);
        let end = addr.checked_add(len).ok_or(Error::InvalidArgument("registration wraps"))?;
        let npages = (end - first).div_ceil(PAGE as u64) as usize;
        if npages > MTT_PER_CMD {
            return Err(Error::InvalidArgument("registration larger than one command's MTT list"));
        }
        let octwords = npages.div_ceil(2);
        let in_len = create_mkey_in::klm_pas_mtt.byte() + 16 * octwords;
        let variant = self.next_variant();
        self.begin(op::CREATE_MKEY, 0, in_len);
        let m = create_mkey_in::memory_key_mkey_entry;
        set(&mut self.inb, create_mkey_in::pg_access, 1);
        set(&mut self.inb, mkc::access_mode_1_0.at(m), 1); // MTT
        self.mkc_access(m, access);
        // Keys handed to a peer may be invalidated by it (SEND WITH INVALIDATE).
        set(&mut self.inb, mkc::en_rinval.at(m), (access.remote_read || access.remote_write) as u64);
        set(&mut self.inb, mkc::qpn.at(m), 0xff_ffff);
        set(&mut self.inb, mkc::mkey_7_0.at(m), variant as u64);
        set(&mut self.inb, mkc::pd.at(m), pd.0 as u64);
        set(&mut self.inb, mkc::start_addr.at(m), addr);
        set(&mut self.inb, mkc::len.at(m), len);
        set(&mut self.inb, mkc::log_page_size.at(m), 12);
        set(&mut self.inb, mkc::translations_octword_size.at(m), octwords as u64);
        set(&mut self.inb, create_mkey_in::translations_octword_actual_size, octwords as u64);
        let mtt = Field { off: create_mkey_in::klm_pas_mtt.off, width: 64 };
        for i in 0..npages {
            // mlx5_mtt: page address | read (bit 0) | write (bit 1) = present.
            set(&mut self.inb, mtt.index(i as u32), (first + (i * PAGE) as u64) | 0b11);
        }
        self.run(in_len, create_mkey_out::LAYOUT.size)?;
        let index = self.out(create_mkey_out::mkey_index) as u32;
        let key = (index << 8) | variant as u32;
        let mk = Mkey { index, lkey: Lkey(key), rkey: Rkey(key), start: addr, len };
        self.mkeys.push(mk);
        Ok(mk)
    }

    /// A free MTT key for fast registration (`SendOp::RegMr` through a send queue, see
    /// [`crate::fastreg`]): `umr_en`, created free (it grants nothing until a UMR registers it),
    /// room for the two translation entries every registration writes. `max_len` is checked
    /// against what one registration can map.
    pub fn alloc_fast_mr(&mut self, max_len: u64) -> Result<Mkey, Error> {
        self.alive()?;
        let pd = self.pd.ok_or(Error::InvalidArgument("no PD"))?;
        if max_len == 0 || max_len > crate::fastreg::MAX_LEN {
            return Err(Error::InvalidArgument("fast registration length out of range"));
        }
        // The translation list is written by each registration; the mailbox carries it empty.
        let in_len = create_mkey_in::klm_pas_mtt.byte() + 16 * crate::fastreg::XLT_OCTOWORDS as usize;
        let variant = self.next_variant();
        self.begin(op::CREATE_MKEY, 0, in_len);
        let m = create_mkey_in::memory_key_mkey_entry;
        set(&mut self.inb, mkc::free.at(m), 1);
        set(&mut self.inb, mkc::umr_en.at(m), 1);
        set(&mut self.inb, mkc::access_mode_1_0.at(m), 1); // MTT
        set(&mut self.inb, mkc::qpn.at(m), 0xff_ffff);
        set(&mut self.inb, mkc::mkey_7_0.at(m), variant as u64);
        set(&mut self.inb, mkc::pd.at(m), pd.0 as u64);
        set(&mut self.inb, mkc::log_page_size.at(m), 12);
        set(&mut self.inb, mkc::translations_octword_size.at(m), crate::fastreg::XLT_OCTOWORDS);
        self.run(in_len, create_mkey_out::LAYOUT.size)?;
        let index = self.out(create_mkey_out::mkey_index) as u32;
        let key = (index << 8) | variant as u32;
        let mk = Mkey { index, lkey: Lkey(key), rkey: Rkey(key), start: 0, len: 0 };
        self.mkeys.push(mk);
        Ok(mk)
    }

    /// Destroy a registration (`reg_mr` or `alloc_fast_mr`) by its key, any variant.
    pub fn dereg_mr(&mut self, lkey: Lkey) -> Result<(), Error> {
        let i = self
            .mkeys
            .iter()
            .position(|m| m.index == lkey.0 >> 8)
            .ok_or(Error::NoSuchObject { kind: "mkey", id: lkey.0 })?;
        let index = self.mkeys[i].index;
        self.simple(op::DESTROY_MKEY, 0, destroy_mkey_in::LAYOUT.size, &[(destroy_mkey_in::mkey_index, index as u64)])?;
        self.mkeys.remove(i);
        Ok(())
    }
}
