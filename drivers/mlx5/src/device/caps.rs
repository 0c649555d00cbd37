//! Bring-up up to the capabilities: ENABLE_HCA, ISSI, host endianness, QUERY/SET_HCA_CAP (general and RoCE) and the limits the driver keeps.

use super::*;

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    pub(super) fn enable_hca(&mut self) -> Result<(), Error> {
        self.simple(op::ENABLE_HCA, 0, enable_hca_in::LAYOUT.size, &[(enable_hca_in::function_id, 0)])
    }

    pub(super) fn set_issi(&mut self) -> Result<(), Error> {
        self.begin(op::QUERY_ISSI, 0, query_issi_in::LAYOUT.size);
        match self.run(query_issi_in::LAYOUT.size, query_issi_out::LAYOUT.size) {
            Ok(()) => {}
            // Firmware without ISSI support answers BAD_OP: it runs ISSI 0.
            Err(Error::Command { status: 0x2, .. }) => {
                self.issi = 0;
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        let supported = self.out(query_issi_out::supported_issi_dw0);
        if supported & 0b10 != 0 {
            self.simple(op::SET_ISSI, 0, set_issi_in::LAYOUT.size, &[(set_issi_in::current_issi, 1)])?;
            self.issi = 1;
        } else if supported & 0b01 != 0 {
            self.issi = 0;
        } else {
            return Err(Error::Unsupported("ISSI 0 or 1"));
        }
        Ok(())
    }

    pub(super) fn host_endianness(&mut self) -> Result<(), Error> {
        // Register data: 16 bytes, byte 0 `he` = 0 for a little-endian host.
        let len = access_register_in::LAYOUT.size + 16;
        self.begin(op::ACCESS_REG, 0, len);
        set(&mut self.inb, access_register_in::register_id, mlx5_ifc::reg::HOST_ENDIANNESS as u64);
        set(&mut self.inb, access_register_in::argument, 0);
        self.run(len, access_register_out::LAYOUT.size + 16)
    }

    pub(super) fn query_cap(&mut self, ty: u16, current: bool) -> Result<(), Error> {
        self.begin(op::QUERY_HCA_CAP, (ty << 1) | current as u16, query_hca_cap_in::LAYOUT.size);
        self.run(query_hca_cap_in::LAYOUT.size, query_hca_cap_out::LAYOUT.size)
    }

    /// The capability block of the last QUERY_HCA_CAP, at `f` (a cmd_hca_cap / roce_cap field).
    pub(super) fn cap(&self, f: Field) -> u64 {
        get(&self.outb, f.at(query_hca_cap_out::capability))
    }

    /// Copy the queried capability block into a SET_HCA_CAP input (op_mod = type << 1).
    pub(super) fn begin_set_cap(&mut self, ty: u16) {
        let cap = query_hca_cap_out::capability;
        let (from, len) = (cap.byte(), cap.bytes());
        let mut block = [0u8; 0x1000];
        block.copy_from_slice(&self.outb[from..from + len]);
        self.begin(op::SET_HCA_CAP, ty << 1, set_hca_cap_in::LAYOUT.size);
        let to = set_hca_cap_in::capability.byte();
        self.inb[to..to + len].copy_from_slice(&block);
    }

    pub(super) fn set_cap_field(&mut self, f: Field, v: u64) {
        set(&mut self.inb, f.at(set_hca_cap_in::capability), v);
    }

    pub(super) fn handle_caps(&mut self) -> Result<(), Error> {
        // General: start from current values; no command checksums, 4 KiB UAR pages.
        self.query_cap(cap_type::GENERAL, true)?;
        self.begin_set_cap(cap_type::GENERAL);
        self.set_cap_field(cmd_hca_cap::cmdif_checksum, 0);
        self.set_cap_field(cmd_hca_cap::log_uar_page_sz, 0);
        self.run(set_hca_cap_in::LAYOUT.size, set_hca_cap_out::LAYOUT.size)?;
        self.query_cap(cap_type::GENERAL, true)?;
        let c = |s: &Self, f| s.cap(f) as u8;
        self.caps = Caps {
            log_max_qp: c(self, cmd_hca_cap::log_max_qp),
            log_max_qp_sz: c(self, cmd_hca_cap::log_max_qp_sz),
            log_max_srq_sz: c(self, cmd_hca_cap::log_max_srq_sz),
            log_max_cq: c(self, cmd_hca_cap::log_max_cq),
            log_max_cq_sz: c(self, cmd_hca_cap::log_max_cq_sz),
            log_max_eq: c(self, cmd_hca_cap::log_max_eq),
            log_max_eq_sz: c(self, cmd_hca_cap::log_max_eq_sz),
            log_max_mkey: c(self, cmd_hca_cap::log_max_mkey),
            log_max_pd: c(self, cmd_hca_cap::log_max_pd),
            log_max_msg: c(self, cmd_hca_cap::log_max_msg),
            log_max_ra_req_qp: c(self, cmd_hca_cap::log_max_ra_req_qp),
            log_max_ra_res_qp: c(self, cmd_hca_cap::log_max_ra_res_qp),
            port_type: c(self, cmd_hca_cap::port_type),
            num_ports: c(self, cmd_hca_cap::num_ports),
            roce: self.cap(cmd_hca_cap::roce) != 0,
            rc: self.cap(cmd_hca_cap::rc) != 0,
            ud: self.cap(cmd_hca_cap::ud) != 0,
            gid_table_size: self.cap(cmd_hca_cap::gid_table_size) as u16,
            cqe_version: c(self, cmd_hca_cap::cqe_version),
            sq_ts_format: c(self, cmd_hca_cap::sq_ts_format),
            rq_ts_format: c(self, cmd_hca_cap::rq_ts_format),
            force_teardown: self.cap(cmd_hca_cap::force_teardown) != 0,
            fast_teardown: self.cap(cmd_hca_cap::fast_teardown) != 0,
            max_qp_cnt: self.cap(cmd_hca_cap::max_qp_cnt) as u16,
            ..Caps::default()
        };
        if !self.caps.rc {
            return Err(Error::Unsupported("RC transport"));
        }
        if self.caps.roce {
            // RoCE: honour the address path's UDP source port when the adapter allows it.
            self.query_cap(cap_type::ROCE, false)?;
            let max_sport = self.cap(roce_cap::sw_r_roce_src_udp_port) != 0;
            self.query_cap(cap_type::ROCE, true)?;
            if max_sport && self.cap(roce_cap::sw_r_roce_src_udp_port) == 0 {
                self.begin_set_cap(cap_type::ROCE);
                self.set_cap_field(roce_cap::sw_r_roce_src_udp_port, 1);
                self.run(set_hca_cap_in::LAYOUT.size, set_hca_cap_out::LAYOUT.size)?;
                self.query_cap(cap_type::ROCE, true)?;
            }
            self.caps.roce_version = self.cap(roce_cap::roce_version) as u8;
            self.caps.qp_ts_format = self.cap(roce_cap::qp_ts_format) as u8;
            self.caps.roce_address_table_size = self.cap(roce_cap::roce_address_table_size) as u16;
            self.caps.sw_r_roce_src_udp_port = self.cap(roce_cap::sw_r_roce_src_udp_port) != 0;
            self.caps.r_roce_min_src_udp_port = self.cap(roce_cap::r_roce_min_src_udp_port) as u16;
            self.caps.r_roce_max_src_udp_port = self.cap(roce_cap::r_roce_max_src_udp_port) as u16;
        }
        Ok(())
    }
}
