//! HCA capabilities: the maximum and current general and RoCE capability pages built from the
//! profile, QUERY_HCA_CAP and SET_HCA_CAP (which fields software may lower or enable).

use super::{fail, need, out, CmdResult, Device, FuncState, GID_TABLE};
use crate::consts::{status as st, synd};
use mlx5_ifc::ifc as l;
use mlx5_ifc::layout::{get, set, Field};

impl Device {
    pub(super) fn reset_caps(&mut self) {
        use l::cmd_hca_cap as c;
        let k = &self.cfg.profile.caps;
        let gen: &[(Field, u64)] = &[
            (c::log_max_srq_sz, k.log_max_srq_sz as u64),
            (c::log_max_qp_sz, k.log_max_qp_sz as u64),
            (c::log_max_qp, k.log_max_qp as u64),
            (c::log_max_srq, k.log_max_srq as u64),
            (c::log_max_cq_sz, k.log_max_cq_sz as u64),
            (c::log_max_cq, k.log_max_cq as u64),
            (c::log_max_eq_sz, k.log_max_eq_sz as u64),
            (c::log_max_mkey, k.log_max_mkey as u64),
            (c::log_max_eq, k.log_max_eq as u64),
            (c::fast_teardown, k.fast_teardown as u64),
            (c::force_teardown, k.force_teardown as u64),
            (c::log_max_ra_req_qp, k.log_max_ra_req_qp as u64),
            (c::log_max_ra_res_qp, k.log_max_ra_res_qp as u64),
            (c::end_pad, 1),
            (c::gid_table_size, GID_TABLE as u64),
            (c::pkey_table_size, 0),
            (c::max_qp_cnt, k.max_qp_cnt as u64),
            (c::out_of_seq_cnt, 1),
            (c::retransmission_q_counters, 0),
            (c::nic_flow_table, 1),
            (c::port_type, 1),
            (c::num_ports, k.num_ports as u64),
            (c::log_max_msg, k.log_max_msg as u64),
            (c::cqe_version, 1),
            (c::cmdif_checksum, 0),
            (c::eth_net_offloads, 1),
            (c::roce, 1),
            (c::atomic, 0),
            (c::ud, 1),
            (c::uc, 0),
            (c::rc, 1),
            (c::uar_4k, 1),
            (c::log_pg_sz, 12),
            (c::bf, 1),
            (c::driver_version, 1),
            (c::log_bf_reg_size, k.log_bf_reg_size as u64),
            (c::max_wqe_sz_sq, k.max_wqe_sz_sq as u64),
            (c::max_wqe_sz_rq, k.max_wqe_sz_rq as u64),
            (c::log_max_transport_domain, 20),
            (c::log_max_pd, k.log_max_pd as u64),
            (c::log_max_rq, 16),
            (c::log_max_sq, 16),
            (c::log_max_tir, 16),
            (c::log_max_tis, 16),
            (c::log_max_wq_sz, 15),
            (c::sq_ts_format, k.sq_ts_format as u64),
            (c::rq_ts_format, k.rq_ts_format as u64),
            (c::log_uar_page_sz, 0),
            (c::device_frequency_mhz, k.device_frequency_mhz as u64),
            (c::num_of_uars_per_page, k.num_of_uars_per_page as u64),
        ];
        self.cap_max = vec![0; 0x1000];
        for &(f, v) in gen {
            set(&mut self.cap_max, f, v);
        }
        // Checksums are "supported" at max (value 1 = ... ) but disabled in current values.
        set(&mut self.cap_max, c::cmdif_checksum, 1);
        self.cap_cur = self.cap_max.clone();
        set(&mut self.cap_cur, c::cmdif_checksum, 0);
        set(&mut self.cap_cur, c::log_max_qp, get(&self.cap_max, c::log_max_qp).saturating_sub(1));
        use l::roce_cap as r;
        self.roce_max = vec![0; 0x1000];
        for &(f, v) in &[
            (r::sw_r_roce_src_udp_port, 1u64),
            (r::l3_type, 0b11),
            (r::roce_version, 0b110),
            (r::r_roce_dest_udp_port, 4791),
            (r::r_roce_max_src_udp_port, 0xffff),
            (r::r_roce_min_src_udp_port, 0xc000),
            (r::roce_address_table_size, GID_TABLE as u64),
            (r::qp_ts_format, self.cfg.profile.caps.qp_ts_format as u64),
        ] {
            set(&mut self.roce_max, f, v);
        }
        self.roce_cur = self.roce_max.clone();
        set(&mut self.roce_cur, r::sw_r_roce_src_udp_port, 0);
    }

    /// QUERY_HCA_CAP: general (type 0), Ethernet offloads (1, none offered) or RoCE (4); max or current.
    pub(super) fn query_hca_cap(&self, op_mod: u16) -> CmdResult {
        let cur = op_mod & 1 == 1;
        let src = match op_mod >> 1 {
            0 => if cur { &self.cap_cur } else { &self.cap_max },
            4 => if cur { &self.roce_cur } else { &self.roce_max },
            _ => &vec![0u8; 0x1000], // Ethernet offload caps: all zero (none offered)
        };
        let mut o = out(0x1010);
        o[0x10..].copy_from_slice(src);
        Ok(o)
    }

    /// SET_HCA_CAP: before INIT_HCA, with the boot pages given, within the maximum.
    pub(super) fn set_hca_cap(&mut self, op_mod: u16, inp: &[u8]) -> CmdResult {
        if self.func != FuncState::Enabled {
            return fail(st::BAD_SYS_STATE, synd::ALREADY_INITIALIZED);
        }
        if self.pages.len() < self.cfg.profile.pages.boot as usize {
            return fail(st::BAD_SYS_STATE, synd::MISSING_BOOT_PAGES);
        }
        need(inp, 0x1010)?;
        let cap = &inp[0x10..0x1010];
        if op_mod >> 1 == 0 {
            use l::cmd_hca_cap as c;
            for f in [c::log_max_qp, c::cmdif_checksum] {
                if get(cap, f) > get(&self.cap_max, f) {
                    return fail(st::BAD_PARAM, synd::CAP_VALUE_OVER_MAX);
                }
            }
            if get(cap, c::log_uar_page_sz) != 0 {
                // The model only does 4 KiB UAR pages.
                return fail(st::BAD_PARAM, synd::CAP_VALUE_OVER_MAX);
            }
            for f in [c::log_max_qp, c::cmdif_checksum, c::pkey_table_size, c::cache_line_128byte, c::uar_4k] {
                set(&mut self.cap_cur, f, get(cap, f));
            }
        } else {
            use l::roce_cap as r;
            let v = get(cap, r::sw_r_roce_src_udp_port);
            if v > get(&self.roce_max, r::sw_r_roce_src_udp_port) {
                return fail(st::BAD_PARAM, synd::CAP_VALUE_OVER_MAX);
            }
            set(&mut self.roce_cur, r::sw_r_roce_src_udp_port, v);
        }
        Ok(out(16))
    }
}
