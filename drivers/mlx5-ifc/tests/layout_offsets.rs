//! Holds the shared layout tables (driver and emulated adapter) against bit offsets taken from the public headers.
//!
//! The numbers below were computed by walking the `_bits` pseudo-structs (one array element per
//! bit) of:
//!   A. rdma-core `providers/mlx5/mlx5_ifc.h` @ 691953d8d502f54088f776c5ba2aeed0a5ac945d
//!      (linux-rdma/rdma-core, 2026-08-20), preferred where it defines the struct;
//!   B. Linux `include/linux/mlx5/mlx5_ifc.h` as carried in gpudirect/mlnx-ofa_kernel
//!      @ 2ce4cd07d208ab03d2e61be1a2037ff43c25b5b9 (2017), for structs A lacks (cqc,
//!      create_cq_in, query_special_contexts, set_roce_address, 2err/2rst, disable_hca, ...).
//!   C. C struct byte offsets of `struct mlx5_init_seg`, `health_buffer`, `mlx5_cmd_layout`,
//!      `mlx5_cmd_block`, `mlx5_eqe` (rdma-core providers/mlx5/mlx5_vfio.h @691953d8) and
//!      `mlx5_cqe64`, `mlx5_wqe_*_seg`, `mlx5_av` (rdma-core providers/mlx5/mlx5dv.h), ×8.
//! They are facts copied as numbers; nothing here is derived from the driver's declarations.
//! Format: (dotted name, bit offset from the start of the outermost struct, bit width).

use mlx5_ifc::{ifc, layout};

const FROM_RDMA_CORE: &[(&str, u32, u32)] = &[
    ("access_register_in.argument", 96, 32),
    ("access_register_in.op_mod", 48, 16),
    ("access_register_in.opcode", 0, 16),
    ("access_register_in.register_data", 128, 32),
    ("access_register_in.register_id", 80, 16),
    ("access_register_out.register_data", 128, 32),
    ("access_register_out.status", 0, 8),
    ("access_register_out.syndrome", 32, 32),
    ("pmtu_reg.local_port", 8, 8),
    ("pmtu_reg.max_mtu", 32, 16),
    ("pmtu_reg.admin_mtu", 64, 16),
    ("pmtu_reg.oper_mtu", 96, 16),
    ("ads.ack_timeout", 64, 5),
    ("ads.dei_cfi", 288, 1),
    ("ads.dscp", 266, 6),
    ("ads.ecn", 264, 2),
    ("ads.eth_prio", 289, 3),
    ("ads.f_dscp", 260, 1),
    ("ads.f_ecn", 261, 1),
    ("ads.f_eth_prio", 263, 1),
    ("ads.fl", 0, 1),
    ("ads.flow_label", 108, 20),
    ("ads.free_ar", 1, 1),
    ("ads.grh", 40, 1),
    ("ads.hop_limit", 88, 8),
    ("ads.mlid", 41, 7),
    ("ads.pkey_index", 16, 16),
    ("ads.rgid_rip", 128, 128),
    ("ads.rlid", 48, 16),
    ("ads.rmac_31_0", 320, 32),
    ("ads.rmac_47_32", 304, 16),
    ("ads.sl", 292, 4),
    ("ads.src_addr_index", 72, 8),
    ("ads.stat_rate", 84, 4),
    ("ads.tclass", 100, 8),
    ("ads.udp_sport", 272, 16),
    ("ads.vhca_port_num", 296, 8),
    ("alloc_pd_in.op_mod", 48, 16),
    ("alloc_pd_in.opcode", 0, 16),
    ("alloc_pd_in.uid", 16, 16),
    ("alloc_pd_out.pd", 72, 24),
    ("alloc_pd_out.status", 0, 8),
    ("alloc_pd_out.syndrome", 32, 32),
    ("alloc_transport_domain_out.transport_domain", 72, 24),
    ("alloc_uar_in.op_mod", 48, 16),
    ("alloc_uar_in.opcode", 0, 16),
    ("alloc_uar_out.status", 0, 8),
    ("alloc_uar_out.syndrome", 32, 32),
    ("alloc_uar_out.uar", 72, 24),
    ("cmd_hca_cap.apm", 558, 1),
    ("cmd_hca_cap.atomic", 542, 1),
    ("cmd_hca_cap.basic_cyclic_rcv_wqe", 896, 1),
    ("cmd_hca_cap.bf", 608, 1),
    ("cmd_hca_cap.block_lb_mc", 552, 1),
    ("cmd_hca_cap.cache_line_128byte", 356, 1),
    ("cmd_hca_cap.cc_modify_allowed", 354, 1),
    ("cmd_hca_cap.cc_query_allowed", 353, 1),
    ("cmd_hca_cap.cd", 556, 1),
    ("cmd_hca_cap.cmdif_checksum", 528, 2),
    ("cmd_hca_cap.compact_address_vector", 512, 1),
    ("cmd_hca_cap.cq_eq_remap", 550, 1),
    ("cmd_hca_cap.cq_moderation", 546, 1),
    ("cmd_hca_cap.cq_oi", 544, 1),
    ("cmd_hca_cap.cq_period_start_from_cqe", 555, 1),
    ("cmd_hca_cap.cq_resize", 545, 1),
    ("cmd_hca_cap.cqe_version", 508, 4),
    ("cmd_hca_cap.dcbx", 465, 1),
    ("cmd_hca_cap.dct", 538, 1),
    ("cmd_hca_cap.device_frequency_khz", 1248, 32),
    ("cmd_hca_cap.device_frequency_mhz", 1216, 32),
    ("cmd_hca_cap.device_memory", 424, 1),
    ("cmd_hca_cap.driver_version", 609, 1),
    ("cmd_hca_cap.end_pad", 352, 1),
    ("cmd_hca_cap.eswitch_manager", 423, 1),
    ("cmd_hca_cap.eth_net_offloads", 540, 1),
    ("cmd_hca_cap.eth_virt", 419, 1),
    ("cmd_hca_cap.ets", 421, 1),
    ("cmd_hca_cap.fast_teardown", 273, 1),
    ("cmd_hca_cap.force_teardown", 272, 1),
    ("cmd_hca_cap.general_notification_event", 466, 1),
    ("cmd_hca_cap.gid_table_size", 368, 16),
    ("cmd_hca_cap.ib_virt", 418, 1),
    ("cmd_hca_cap.imaicl", 561, 1),
    ("cmd_hca_cap.ipoib_basic_offloads", 516, 1),
    ("cmd_hca_cap.ipoib_enhanced_offloads", 515, 1),
    ("cmd_hca_cap.lag_master", 635, 1),
    ("cmd_hca_cap.local_ca_ack_delay", 427, 5),
    ("cmd_hca_cap.log_bf_reg_size", 619, 5),
    ("cmd_hca_cap.log_max_cq", 219, 5),
    ("cmd_hca_cap.log_max_cq_sz", 200, 8),
    ("cmd_hca_cap.log_max_current_mc_list", 1011, 5),
    ("cmd_hca_cap.log_max_current_uc_list", 1019, 5),
    ("cmd_hca_cap.log_max_eq", 252, 4),
    ("cmd_hca_cap.log_max_eq_sz", 224, 8),
    ("cmd_hca_cap.log_max_flow_counter_bulk", 840, 8),
    ("cmd_hca_cap.log_max_klm_list_size", 282, 6),
    ("cmd_hca_cap.log_max_l2_table", 1155, 5),
    ("cmd_hca_cap.log_max_mcg", 792, 8),
    ("cmd_hca_cap.log_max_mkey", 234, 6),
    ("cmd_hca_cap.log_max_mrw_sz", 265, 7),
    ("cmd_hca_cap.log_max_msg", 451, 5),
    ("cmd_hca_cap.log_max_pasid", 1307, 5),
    ("cmd_hca_cap.log_max_pd", 811, 5),
    ("cmd_hca_cap.log_max_qp", 155, 5),
    ("cmd_hca_cap.log_max_qp_sz", 136, 8),
    ("cmd_hca_cap.log_max_ra_req_dc", 298, 6),
    ("cmd_hca_cap.log_max_ra_req_qp", 330, 6),
    ("cmd_hca_cap.log_max_ra_res_dc", 314, 6),
    ("cmd_hca_cap.log_max_ra_res_qp", 346, 6),
    ("cmd_hca_cap.log_max_rmp", 899, 5),
    ("cmd_hca_cap.log_max_rq", 867, 5),
    ("cmd_hca_cap.log_max_rqt", 907, 5),
    ("cmd_hca_cap.log_max_rqt_size", 915, 5),
    ("cmd_hca_cap.log_max_sq", 875, 5),
    ("cmd_hca_cap.log_max_srq", 171, 5),
    ("cmd_hca_cap.log_max_srq_sz", 128, 8),
    ("cmd_hca_cap.log_max_stride_sz_rq", 931, 5),
    ("cmd_hca_cap.log_max_stride_sz_sq", 947, 5),
    ("cmd_hca_cap.log_max_tir", 883, 5),
    ("cmd_hca_cap.log_max_tis", 891, 5),
    ("cmd_hca_cap.log_max_tis_per_sq", 923, 5),
    ("cmd_hca_cap.log_max_transport_domain", 803, 5),
    ("cmd_hca_cap.log_max_vlan_list", 1003, 5),
    ("cmd_hca_cap.log_max_wq_sz", 987, 5),
    ("cmd_hca_cap.log_max_xrcd", 827, 5),
    ("cmd_hca_cap.log_min_stride_sz_rq", 939, 5),
    ("cmd_hca_cap.log_min_stride_sz_sq", 955, 5),
    ("cmd_hca_cap.log_pg_sz", 600, 8),
    ("cmd_hca_cap.log_uar_page_sz", 1168, 16),
    ("cmd_hca_cap.max_indirection", 256, 8),
    ("cmd_hca_cap.max_qp_mcg", 743, 25),
    ("cmd_hca_cap.max_tc", 460, 4),
    ("cmd_hca_cap.max_wqe_sz_rq", 688, 16),
    ("cmd_hca_cap.max_wqe_sz_sq", 656, 16),
    ("cmd_hca_cap.max_wqe_sz_sq_dc", 720, 16),
    ("cmd_hca_cap.mcam_reg", 425, 1),
    ("cmd_hca_cap.nic_flow_table", 422, 1),
    ("cmd_hca_cap.null_mkey", 281, 1),
    ("cmd_hca_cap.num_lag_ports", 636, 4),
    ("cmd_hca_cap.num_of_uars_per_page", 1312, 32),
    ("cmd_hca_cap.num_ports", 440, 8),
    ("cmd_hca_cap.out_of_seq_cnt", 384, 1),
    ("cmd_hca_cap.pad_tx_eth_packet", 610, 1),
    ("cmd_hca_cap.pcam_reg", 426, 1),
    ("cmd_hca_cap.pg", 551, 1),
    ("cmd_hca_cap.pkey_table_size", 400, 16),
    ("cmd_hca_cap.pkv", 567, 1),
    ("cmd_hca_cap.port_module_event", 432, 1),
    ("cmd_hca_cap.port_type", 438, 2),
    ("cmd_hca_cap.qkv", 566, 1),
    ("cmd_hca_cap.qos", 539, 1),
    ("cmd_hca_cap.rc", 575, 1),
    ("cmd_hca_cap.rq_ts_format", 1090, 2),
    ("cmd_hca_cap.sq_ts_format", 1088, 2),
    ("cmd_hca_cap.retransmission_q_counters", 386, 1),
    ("cmd_hca_cap.rf", 537, 1),
    ("cmd_hca_cap.roce", 541, 1),
    ("cmd_hca_cap.rol_g", 471, 1),
    ("cmd_hca_cap.rol_s", 470, 1),
    ("cmd_hca_cap.scqe_break_moderation", 554, 1),
    ("cmd_hca_cap.sctr_data_cqe", 533, 1),
    ("cmd_hca_cap.set_deth_sqpn", 568, 1),
    ("cmd_hca_cap.sho", 535, 1),
    ("cmd_hca_cap.sigerr_cqe", 530, 1),
    ("cmd_hca_cap.start_pad", 355, 1),
    ("cmd_hca_cap.stat_rate_support", 480, 16),
    ("cmd_hca_cap.temp_warn_event", 464, 1),
    ("cmd_hca_cap.tph", 536, 1),
    ("cmd_hca_cap.uar_4k", 576, 1),
    ("cmd_hca_cap.uar_sz", 586, 6),
    ("cmd_hca_cap.uc", 574, 1),
    ("cmd_hca_cap.ud", 573, 1),
    ("cmd_hca_cap.umr_extended_translation_offset", 280, 1),
    ("cmd_hca_cap.vector_calc", 559, 1),
    ("cmd_hca_cap.vhca_group_manager", 417, 1),
    ("cmd_hca_cap.vhca_resource_manager", 31, 1),
    ("cmd_hca_cap.vnic_env_queue_counters", 420, 1),
    ("cmd_hca_cap.vport_counters", 385, 1),
    ("cmd_hca_cap.vport_group_manager", 416, 1),
    ("cmd_hca_cap.wol_a", 475, 1),
    ("cmd_hca_cap.wol_b", 476, 1),
    ("cmd_hca_cap.wol_g", 474, 1),
    ("cmd_hca_cap.wol_m", 477, 1),
    ("cmd_hca_cap.wol_p", 479, 1),
    ("cmd_hca_cap.wol_s", 473, 1),
    ("cmd_hca_cap.wol_u", 478, 1),
    ("cmd_hca_cap.wq_signature", 532, 1),
    ("cmd_hca_cap.xrc", 572, 1),
    ("create_cq_out.cqn", 72, 24),
    ("create_eq_in.eq_context_entry.consumer_counter", 456, 24),
    ("create_eq_in.eq_context_entry.ec", 141, 1),
    ("create_eq_in.eq_context_entry.intr", 312, 8),
    ("create_eq_in.eq_context_entry.log_eq_size", 227, 5),
    ("create_eq_in.eq_context_entry.log_page_size", 323, 5),
    ("create_eq_in.eq_context_entry.oi", 142, 1),
    ("create_eq_in.eq_context_entry.page_offset", 212, 6),
    ("create_eq_in.eq_context_entry.producer_counter", 488, 24),
    ("create_eq_in.eq_context_entry.st", 148, 4),
    ("create_eq_in.eq_context_entry.status", 128, 4),
    ("create_eq_in.eq_context_entry.uar_page", 232, 24),
    ("create_eq_in.event_bitmask", 704, 256),
    ("create_eq_in.op_mod", 48, 16),
    ("create_eq_in.opcode", 0, 16),
    ("create_eq_in.pas", 2176, 64),
    ("create_eq_in.uid", 16, 16),
    ("create_eq_out.eq_number", 88, 8),
    ("create_eq_out.status", 0, 8),
    ("create_eq_out.syndrome", 32, 32),
    ("create_mkey_in.klm_pas_mtt", 2176, 32),
    ("create_mkey_in.memory_key_mkey_entry.a", 145, 1),
    ("create_mkey_in.memory_key_mkey_entry.access_mode_1_0", 150, 2),
    ("create_mkey_in.memory_key_mkey_entry.access_mode_4_2", 131, 3),
    ("create_mkey_in.memory_key_mkey_entry.bsf_en", 225, 1),
    ("create_mkey_in.memory_key_mkey_entry.bsf_octword_size", 384, 32),
    ("create_mkey_in.memory_key_mkey_entry.crypto_en", 611, 2),
    ("create_mkey_in.memory_key_mkey_entry.en_rinval", 231, 1),
    ("create_mkey_in.memory_key_mkey_entry.expected_sigerr_count", 229, 1),
    ("create_mkey_in.memory_key_mkey_entry.free", 129, 1),
    ("create_mkey_in.memory_key_mkey_entry.len", 320, 64),
    ("create_mkey_in.memory_key_mkey_entry.length64", 224, 1),
    ("create_mkey_in.memory_key_mkey_entry.log_page_size", 603, 5),
    ("create_mkey_in.memory_key_mkey_entry.lr", 149, 1),
    ("create_mkey_in.memory_key_mkey_entry.lw", 148, 1),
    ("create_mkey_in.memory_key_mkey_entry.mkey_7_0", 184, 8),
    ("create_mkey_in.memory_key_mkey_entry.pd", 232, 24),
    ("create_mkey_in.memory_key_mkey_entry.qpn", 160, 24),
    ("create_mkey_in.memory_key_mkey_entry.relaxed_ordering_read", 601, 1),
    ("create_mkey_in.memory_key_mkey_entry.relaxed_ordering_write", 141, 1),
    ("create_mkey_in.memory_key_mkey_entry.rr", 147, 1),
    ("create_mkey_in.memory_key_mkey_entry.rw", 146, 1),
    ("create_mkey_in.memory_key_mkey_entry.small_fence_on_rdma_read_response", 143, 1),
    ("create_mkey_in.memory_key_mkey_entry.start_addr", 256, 64),
    ("create_mkey_in.memory_key_mkey_entry.sync_umr", 226, 1),
    ("create_mkey_in.memory_key_mkey_entry.translations_octword_size", 544, 32),
    ("create_mkey_in.memory_key_mkey_entry.umr_en", 144, 1),
    ("create_mkey_in.mkey_umem_valid", 97, 1),
    ("create_mkey_in.op_mod", 48, 16),
    ("create_mkey_in.opcode", 0, 16),
    ("create_mkey_in.pg_access", 96, 1),
    ("create_mkey_in.translations_octword_actual_size", 768, 32),
    ("create_mkey_out.mkey_index", 72, 24),
    ("create_mkey_out.status", 0, 8),
    ("create_mkey_out.syndrome", 32, 32),
    ("create_qp_in.op_mod", 48, 16),
    ("create_qp_in.opcode", 0, 16),
    ("create_qp_in.opt_param_mask", 128, 32),
    ("create_qp_in.pas", 2176, 64),
    ("create_qp_in.qpc.atomic_like_write_en", 226, 1),
    ("create_qp_in.qpc.atomic_mode", 1356, 4),
    ("create_qp_in.qpc.block_lb_mc", 225, 1),
    ("create_qp_in.qpc.cd_master", 1375, 1),
    ("create_qp_in.qpc.cd_slave_receive", 1373, 1),
    ("create_qp_in.qpc.cd_slave_send", 1374, 1),
    ("create_qp_in.qpc.cgs", 1775, 1),
    ("create_qp_in.qpc.counter_set_id", 288, 8),
    ("create_qp_in.qpc.cqn_rcv", 1448, 24),
    ("create_qp_in.qpc.cqn_snd", 1192, 24),
    ("create_qp_in.qpc.cs_req", 1776, 8),
    ("create_qp_in.qpc.cs_res", 1784, 8),
    ("create_qp_in.qpc.cur_retry_count", 1112, 3),
    ("create_qp_in.qpc.cur_rnr_retry", 1109, 3),
    ("create_qp_in.qpc.data_in_order", 282, 1),
    ("create_qp_in.qpc.dbr_addr", 1472, 64),
    ("create_qp_in.qpc.dbr_umem_id", 2016, 32),
    ("create_qp_in.qpc.dbr_umem_valid", 1859, 1),
    ("create_qp_in.qpc.dc_access_key", 1792, 64),
    ("create_qp_in.qpc.deth_sqpn", 1224, 24),
    ("create_qp_in.qpc.drain_sigerr", 229, 1),
    ("create_qp_in.qpc.end_padding_mode", 220, 2),
    ("create_qp_in.qpc.fre", 1108, 1),
    ("create_qp_in.qpc.hw_rq_counter", 1664, 32),
    ("create_qp_in.qpc.hw_sq_wqebb_counter", 1632, 16),
    ("create_qp_in.qpc.isolate_vl_tc", 210, 1),
    ("create_qp_in.qpc.lag_tx_port_affinity", 196, 4),
    ("create_qp_in.qpc.last_acked_psn", 1288, 24),
    ("create_qp_in.qpc.latency_sensitive", 227, 1),
    ("create_qp_in.qpc.log_ack_req_freq", 1088, 4),
    ("create_qp_in.qpc.log_msg_max", 259, 5),
    ("create_qp_in.qpc.log_page_size", 355, 5),
    ("create_qp_in.qpc.log_rq_size", 265, 4),
    ("create_qp_in.qpc.log_rq_stride", 269, 3),
    ("create_qp_in.qpc.log_rra_max", 1352, 3),
    ("create_qp_in.qpc.log_sq_size", 273, 4),
    ("create_qp_in.qpc.log_sra_max", 1096, 3),
    ("create_qp_in.qpc.min_rnr_nak", 1379, 5),
    ("create_qp_in.qpc.mtu", 256, 3),
    ("create_qp_in.qpc.next_rcv_psn", 1384, 24),
    ("create_qp_in.qpc.next_send_psn", 1160, 24),
    ("create_qp_in.qpc.no_sq", 272, 1),
    ("create_qp_in.qpc.offload_type", 216, 4),
    ("create_qp_in.qpc.page_offset", 1364, 6),
    ("create_qp_in.qpc.pd", 232, 24),
    ("create_qp_in.qpc.pm_state", 211, 2),
    ("create_qp_in.qpc.primary_address_path.ack_timeout", 448, 5),
    ("create_qp_in.qpc.primary_address_path.dei_cfi", 672, 1),
    ("create_qp_in.qpc.primary_address_path.dscp", 650, 6),
    ("create_qp_in.qpc.primary_address_path.ecn", 648, 2),
    ("create_qp_in.qpc.primary_address_path.eth_prio", 673, 3),
    ("create_qp_in.qpc.primary_address_path.f_dscp", 644, 1),
    ("create_qp_in.qpc.primary_address_path.f_ecn", 645, 1),
    ("create_qp_in.qpc.primary_address_path.f_eth_prio", 647, 1),
    ("create_qp_in.qpc.primary_address_path.fl", 384, 1),
    ("create_qp_in.qpc.primary_address_path.flow_label", 492, 20),
    ("create_qp_in.qpc.primary_address_path.free_ar", 385, 1),
    ("create_qp_in.qpc.primary_address_path.grh", 424, 1),
    ("create_qp_in.qpc.primary_address_path.hop_limit", 472, 8),
    ("create_qp_in.qpc.primary_address_path.mlid", 425, 7),
    ("create_qp_in.qpc.primary_address_path.pkey_index", 400, 16),
    ("create_qp_in.qpc.primary_address_path.rgid_rip", 512, 128),
    ("create_qp_in.qpc.primary_address_path.rlid", 432, 16),
    ("create_qp_in.qpc.primary_address_path.rmac_31_0", 704, 32),
    ("create_qp_in.qpc.primary_address_path.rmac_47_32", 688, 16),
    ("create_qp_in.qpc.primary_address_path.sl", 676, 4),
    ("create_qp_in.qpc.primary_address_path.src_addr_index", 456, 8),
    ("create_qp_in.qpc.primary_address_path.stat_rate", 468, 4),
    ("create_qp_in.qpc.primary_address_path.tclass", 484, 8),
    ("create_qp_in.qpc.primary_address_path.udp_sport", 656, 16),
    ("create_qp_in.qpc.primary_address_path.vhca_port_num", 680, 8),
    ("create_qp_in.qpc.q_key", 1536, 32),
    ("create_qp_in.qpc.rae", 1362, 1),
    ("create_qp_in.qpc.remote_qpn", 360, 24),
    ("create_qp_in.qpc.req_e2e_credit_mode", 214, 2),
    ("create_qp_in.qpc.retry_count", 1101, 3),
    ("create_qp_in.qpc.rlky", 283, 1),
    ("create_qp_in.qpc.rmsn", 1608, 24),
    ("create_qp_in.qpc.rnr_retry", 1104, 3),
    ("create_qp_in.qpc.rq_type", 1573, 3),
    ("create_qp_in.qpc.rre", 1360, 1),
    ("create_qp_in.qpc.rwe", 1361, 1),
    ("create_qp_in.qpc.srqn_rmpn_xrqn", 1576, 24),
    ("create_qp_in.qpc.ssn", 1320, 24),
    ("create_qp_in.qpc.st", 200, 8),
    ("create_qp_in.qpc.state", 192, 4),
    ("create_qp_in.qpc.sw_rq_counter", 1696, 32),
    ("create_qp_in.qpc.sw_sq_wqebb_counter", 1648, 16),
    ("create_qp_in.qpc.ts_format", 280, 2),
    ("create_qp_in.qpc.uar_page", 296, 24),
    ("create_qp_in.qpc.ulp_stateless_offload_mode", 284, 4),
    ("create_qp_in.qpc.user_index", 328, 24),
    ("create_qp_in.qpc.wq_signature", 224, 1),
    ("create_qp_in.qpc.xrcd", 1416, 24),
    ("create_qp_in.uid", 16, 16),
    ("create_qp_in.wq_umem_id", 2112, 32),
    ("create_qp_in.wq_umem_valid", 2144, 1),
    ("create_qp_out.qpn", 72, 24),
    ("create_qp_out.status", 0, 8),
    ("create_qp_out.syndrome", 32, 32),
    ("dealloc_pd_in.op_mod", 48, 16),
    ("dealloc_pd_in.opcode", 0, 16),
    ("dealloc_pd_in.pd", 72, 24),
    ("dealloc_pd_in.uid", 16, 16),
    ("dealloc_pd_out.status", 0, 8),
    ("dealloc_pd_out.syndrome", 32, 32),
    ("dealloc_transport_domain_in.opcode", 0, 16),
    ("dealloc_transport_domain_in.transport_domain", 72, 24),
    ("dealloc_transport_domain_in.uid", 16, 16),
    ("dealloc_uar_in.op_mod", 48, 16),
    ("dealloc_uar_in.opcode", 0, 16),
    ("dealloc_uar_in.uar", 72, 24),
    ("dealloc_uar_out.status", 0, 8),
    ("dealloc_uar_out.syndrome", 32, 32),
    ("destroy_cq_in.cqn", 72, 24),
    ("destroy_cq_in.opcode", 0, 16),
    ("destroy_cq_in.uid", 16, 16),
    ("destroy_eq_in.eq_number", 88, 8),
    ("destroy_eq_in.op_mod", 48, 16),
    ("destroy_eq_in.opcode", 0, 16),
    ("destroy_eq_out.status", 0, 8),
    ("destroy_eq_out.syndrome", 32, 32),
    ("destroy_mkey_in.mkey_index", 72, 24),
    ("destroy_mkey_in.op_mod", 48, 16),
    ("destroy_mkey_in.opcode", 0, 16),
    ("destroy_mkey_in.uid", 16, 16),
    ("destroy_mkey_out.status", 0, 8),
    ("destroy_mkey_out.syndrome", 32, 32),
    ("destroy_qp_in.opcode", 0, 16),
    ("destroy_qp_in.qpn", 72, 24),
    ("destroy_qp_in.uid", 16, 16),
    ("enable_hca_in.function_id", 80, 16),
    ("enable_hca_in.op_mod", 48, 16),
    ("enable_hca_in.opcode", 0, 16),
    ("enable_hca_out.status", 0, 8),
    ("enable_hca_out.syndrome", 32, 32),
    ("eqc.consumer_counter", 328, 24),
    ("eqc.ec", 13, 1),
    ("eqc.intr", 184, 8),
    ("eqc.log_eq_size", 99, 5),
    ("eqc.log_page_size", 195, 5),
    ("eqc.oi", 14, 1),
    ("eqc.page_offset", 84, 6),
    ("eqc.producer_counter", 360, 24),
    ("eqc.st", 20, 4),
    ("eqc.status", 0, 4),
    ("eqc.uar_page", 104, 24),
    ("init2rtr_qp_in.op_mod", 48, 16),
    ("init2rtr_qp_in.opcode", 0, 16),
    ("init2rtr_qp_in.opt_param_mask", 128, 32),
    ("init2rtr_qp_in.qpc.log_msg_max", 259, 5),
    ("init2rtr_qp_in.qpc.log_rra_max", 1352, 3),
    ("init2rtr_qp_in.qpc.min_rnr_nak", 1379, 5),
    ("init2rtr_qp_in.qpc.mtu", 256, 3),
    ("init2rtr_qp_in.qpc.next_rcv_psn", 1384, 24),
    ("init2rtr_qp_in.qpc.primary_address_path.ack_timeout", 448, 5),
    ("init2rtr_qp_in.qpc.primary_address_path.dei_cfi", 672, 1),
    ("init2rtr_qp_in.qpc.primary_address_path.dscp", 650, 6),
    ("init2rtr_qp_in.qpc.primary_address_path.ecn", 648, 2),
    ("init2rtr_qp_in.qpc.primary_address_path.eth_prio", 673, 3),
    ("init2rtr_qp_in.qpc.primary_address_path.f_dscp", 644, 1),
    ("init2rtr_qp_in.qpc.primary_address_path.f_ecn", 645, 1),
    ("init2rtr_qp_in.qpc.primary_address_path.f_eth_prio", 647, 1),
    ("init2rtr_qp_in.qpc.primary_address_path.fl", 384, 1),
    ("init2rtr_qp_in.qpc.primary_address_path.flow_label", 492, 20),
    ("init2rtr_qp_in.qpc.primary_address_path.free_ar", 385, 1),
    ("init2rtr_qp_in.qpc.primary_address_path.grh", 424, 1),
    ("init2rtr_qp_in.qpc.primary_address_path.hop_limit", 472, 8),
    ("init2rtr_qp_in.qpc.primary_address_path.mlid", 425, 7),
    ("init2rtr_qp_in.qpc.primary_address_path.pkey_index", 400, 16),
    ("init2rtr_qp_in.qpc.primary_address_path.rgid_rip", 512, 128),
    ("init2rtr_qp_in.qpc.primary_address_path.rlid", 432, 16),
    ("init2rtr_qp_in.qpc.primary_address_path.rmac_31_0", 704, 32),
    ("init2rtr_qp_in.qpc.primary_address_path.rmac_47_32", 688, 16),
    ("init2rtr_qp_in.qpc.primary_address_path.sl", 676, 4),
    ("init2rtr_qp_in.qpc.primary_address_path.src_addr_index", 456, 8),
    ("init2rtr_qp_in.qpc.primary_address_path.stat_rate", 468, 4),
    ("init2rtr_qp_in.qpc.primary_address_path.tclass", 484, 8),
    ("init2rtr_qp_in.qpc.primary_address_path.udp_sport", 656, 16),
    ("init2rtr_qp_in.qpc.primary_address_path.vhca_port_num", 680, 8),
    ("init2rtr_qp_in.qpc.remote_qpn", 360, 24),
    ("init2rtr_qp_in.qpn", 72, 24),
    ("init2rtr_qp_in.uid", 16, 16),
    ("init2rtr_qp_out.status", 0, 8),
    ("init2rtr_qp_out.syndrome", 32, 32),
    ("init_hca_in.op_mod", 48, 16),
    ("init_hca_in.opcode", 0, 16),
    ("init_hca_out.status", 0, 8),
    ("init_hca_out.syndrome", 32, 32),
    ("manage_pages_in.embedded_cpu_function", 64, 1),
    ("manage_pages_in.function_id", 80, 16),
    ("manage_pages_in.input_num_entries", 96, 32),
    ("manage_pages_in.op_mod", 48, 16),
    ("manage_pages_in.opcode", 0, 16),
    ("manage_pages_in.pas", 128, 64),
    ("manage_pages_out.output_num_entries", 64, 32),
    ("manage_pages_out.pas", 128, 64),
    ("manage_pages_out.status", 0, 8),
    ("manage_pages_out.syndrome", 32, 32),
    ("mbox_in.op_mod", 48, 16),
    ("mbox_in.opcode", 0, 16),
    ("mbox_in.uid", 16, 16),
    ("mbox_out.status", 0, 8),
    ("mbox_out.syndrome", 32, 32),
    ("mkc.a", 17, 1),
    ("mkc.access_mode_1_0", 22, 2),
    ("mkc.access_mode_4_2", 3, 3),
    ("mkc.bsf_en", 97, 1),
    ("mkc.bsf_octword_size", 256, 32),
    ("mkc.crypto_en", 483, 2),
    ("mkc.en_rinval", 103, 1),
    ("mkc.expected_sigerr_count", 101, 1),
    ("mkc.free", 1, 1),
    ("mkc.len", 192, 64),
    ("mkc.length64", 96, 1),
    ("mkc.log_page_size", 475, 5),
    ("mkc.lr", 21, 1),
    ("mkc.lw", 20, 1),
    ("mkc.mkey_7_0", 56, 8),
    ("mkc.pd", 104, 24),
    ("mkc.qpn", 32, 24),
    ("mkc.relaxed_ordering_read", 473, 1),
    ("mkc.relaxed_ordering_write", 13, 1),
    ("mkc.rr", 19, 1),
    ("mkc.rw", 18, 1),
    ("mkc.small_fence_on_rdma_read_response", 15, 1),
    ("mkc.start_addr", 128, 64),
    ("mkc.sync_umr", 98, 1),
    ("mkc.translations_octword_size", 416, 32),
    ("mkc.umr_en", 16, 1),
    ("modify_nic_vport_context_in.field_select.addresses_list", 125, 1),
    ("modify_nic_vport_context_in.field_select.affiliation", 114, 1),
    ("modify_nic_vport_context_in.field_select.change_event", 122, 1),
    ("modify_nic_vport_context_in.field_select.disable_mc_local_lb", 117, 1),
    ("modify_nic_vport_context_in.field_select.disable_uc_local_lb", 116, 1),
    ("modify_nic_vport_context_in.field_select.min_inline", 120, 1),
    ("modify_nic_vport_context_in.field_select.mtu", 121, 1),
    ("modify_nic_vport_context_in.field_select.node_guid", 118, 1),
    ("modify_nic_vport_context_in.field_select.permanent_address", 124, 1),
    ("modify_nic_vport_context_in.field_select.port_guid", 119, 1),
    ("modify_nic_vport_context_in.field_select.promisc", 123, 1),
    ("modify_nic_vport_context_in.field_select.roce_en", 126, 1),
    ("modify_nic_vport_context_in.nic_vport_context.roce_en", 2079, 1),
    ("modify_nic_vport_context_in.op_mod", 48, 16),
    ("modify_nic_vport_context_in.opcode", 0, 16),
    ("modify_nic_vport_context_in.other_vport", 64, 1),
    ("modify_nic_vport_context_in.vport_number", 80, 16),
    ("modify_nic_vport_context_out.status", 0, 8),
    ("modify_nic_vport_context_out.syndrome", 32, 32),
    ("nic_vport_context.roce_en", 31, 1),
    ("qpc.atomic_like_write_en", 34, 1),
    ("qpc.atomic_mode", 1164, 4),
    ("qpc.block_lb_mc", 33, 1),
    ("qpc.cd_master", 1183, 1),
    ("qpc.cd_slave_receive", 1181, 1),
    ("qpc.cd_slave_send", 1182, 1),
    ("qpc.cgs", 1583, 1),
    ("qpc.counter_set_id", 96, 8),
    ("qpc.cqn_rcv", 1256, 24),
    ("qpc.cqn_snd", 1000, 24),
    ("qpc.cs_req", 1584, 8),
    ("qpc.cs_res", 1592, 8),
    ("qpc.cur_retry_count", 920, 3),
    ("qpc.cur_rnr_retry", 917, 3),
    ("qpc.data_in_order", 90, 1),
    ("qpc.dbr_addr", 1280, 64),
    ("qpc.dbr_umem_id", 1824, 32),
    ("qpc.dbr_umem_valid", 1667, 1),
    ("qpc.dc_access_key", 1600, 64),
    ("qpc.deth_sqpn", 1032, 24),
    ("qpc.drain_sigerr", 37, 1),
    ("qpc.end_padding_mode", 28, 2),
    ("qpc.fre", 916, 1),
    ("qpc.hw_rq_counter", 1472, 32),
    ("qpc.hw_sq_wqebb_counter", 1440, 16),
    ("qpc.isolate_vl_tc", 18, 1),
    ("qpc.lag_tx_port_affinity", 4, 4),
    ("qpc.last_acked_psn", 1096, 24),
    ("qpc.latency_sensitive", 35, 1),
    ("qpc.log_ack_req_freq", 896, 4),
    ("qpc.log_msg_max", 67, 5),
    ("qpc.log_page_size", 163, 5),
    ("qpc.log_rq_size", 73, 4),
    ("qpc.log_rq_stride", 77, 3),
    ("qpc.log_rra_max", 1160, 3),
    ("qpc.log_sq_size", 81, 4),
    ("qpc.log_sra_max", 904, 3),
    ("qpc.min_rnr_nak", 1187, 5),
    ("qpc.mtu", 64, 3),
    ("qpc.next_rcv_psn", 1192, 24),
    ("qpc.next_send_psn", 968, 24),
    ("qpc.no_sq", 80, 1),
    ("qpc.offload_type", 24, 4),
    ("qpc.page_offset", 1172, 6),
    ("qpc.pd", 40, 24),
    ("qpc.pm_state", 19, 2),
    ("qpc.primary_address_path.ack_timeout", 256, 5),
    ("qpc.primary_address_path.dei_cfi", 480, 1),
    ("qpc.primary_address_path.dscp", 458, 6),
    ("qpc.primary_address_path.ecn", 456, 2),
    ("qpc.primary_address_path.eth_prio", 481, 3),
    ("qpc.primary_address_path.f_dscp", 452, 1),
    ("qpc.primary_address_path.f_ecn", 453, 1),
    ("qpc.primary_address_path.f_eth_prio", 455, 1),
    ("qpc.primary_address_path.fl", 192, 1),
    ("qpc.primary_address_path.flow_label", 300, 20),
    ("qpc.primary_address_path.free_ar", 193, 1),
    ("qpc.primary_address_path.grh", 232, 1),
    ("qpc.primary_address_path.hop_limit", 280, 8),
    ("qpc.primary_address_path.mlid", 233, 7),
    ("qpc.primary_address_path.pkey_index", 208, 16),
    ("qpc.primary_address_path.rgid_rip", 320, 128),
    ("qpc.primary_address_path.rlid", 240, 16),
    ("qpc.primary_address_path.rmac_31_0", 512, 32),
    ("qpc.primary_address_path.rmac_47_32", 496, 16),
    ("qpc.primary_address_path.sl", 484, 4),
    ("qpc.primary_address_path.src_addr_index", 264, 8),
    ("qpc.primary_address_path.stat_rate", 276, 4),
    ("qpc.primary_address_path.tclass", 292, 8),
    ("qpc.primary_address_path.udp_sport", 464, 16),
    ("qpc.primary_address_path.vhca_port_num", 488, 8),
    ("qpc.q_key", 1344, 32),
    ("qpc.rae", 1170, 1),
    ("qpc.remote_qpn", 168, 24),
    ("qpc.req_e2e_credit_mode", 22, 2),
    ("qpc.retry_count", 909, 3),
    ("qpc.rlky", 91, 1),
    ("qpc.rmsn", 1416, 24),
    ("qpc.rnr_retry", 912, 3),
    ("qpc.rq_type", 1381, 3),
    ("qpc.rre", 1168, 1),
    ("qpc.rwe", 1169, 1),
    ("qpc.secondary_address_path.ack_timeout", 608, 5),
    ("qpc.secondary_address_path.dei_cfi", 832, 1),
    ("qpc.secondary_address_path.dscp", 810, 6),
    ("qpc.secondary_address_path.ecn", 808, 2),
    ("qpc.secondary_address_path.eth_prio", 833, 3),
    ("qpc.secondary_address_path.f_dscp", 804, 1),
    ("qpc.secondary_address_path.f_ecn", 805, 1),
    ("qpc.secondary_address_path.f_eth_prio", 807, 1),
    ("qpc.secondary_address_path.fl", 544, 1),
    ("qpc.secondary_address_path.flow_label", 652, 20),
    ("qpc.secondary_address_path.free_ar", 545, 1),
    ("qpc.secondary_address_path.grh", 584, 1),
    ("qpc.secondary_address_path.hop_limit", 632, 8),
    ("qpc.secondary_address_path.mlid", 585, 7),
    ("qpc.secondary_address_path.pkey_index", 560, 16),
    ("qpc.secondary_address_path.rgid_rip", 672, 128),
    ("qpc.secondary_address_path.rlid", 592, 16),
    ("qpc.secondary_address_path.rmac_31_0", 864, 32),
    ("qpc.secondary_address_path.rmac_47_32", 848, 16),
    ("qpc.secondary_address_path.sl", 836, 4),
    ("qpc.secondary_address_path.src_addr_index", 616, 8),
    ("qpc.secondary_address_path.stat_rate", 628, 4),
    ("qpc.secondary_address_path.tclass", 644, 8),
    ("qpc.secondary_address_path.udp_sport", 816, 16),
    ("qpc.secondary_address_path.vhca_port_num", 840, 8),
    ("qpc.srqn_rmpn_xrqn", 1384, 24),
    ("qpc.ssn", 1128, 24),
    ("qpc.st", 8, 8),
    ("qpc.state", 0, 4),
    ("qpc.sw_rq_counter", 1504, 32),
    ("qpc.sw_sq_wqebb_counter", 1456, 16),
    ("qpc.ts_format", 88, 2),
    ("qpc.uar_page", 104, 24),
    ("qpc.ulp_stateless_offload_mode", 92, 4),
    ("qpc.user_index", 136, 24),
    ("qpc.wq_signature", 32, 1),
    ("qpc.xrcd", 1224, 24),
    ("query_hca_cap_in.function_id", 80, 16),
    ("query_hca_cap_in.op_mod", 48, 16),
    ("query_hca_cap_in.opcode", 0, 16),
    ("query_hca_cap_in.other_function", 64, 1),
    ("query_hca_cap_out.capability", 128, 32768),
    ("query_hca_cap_out.status", 0, 8),
    ("query_hca_cap_out.syndrome", 32, 32),
    ("query_issi_in.op_mod", 48, 16),
    ("query_issi_in.opcode", 0, 16),
    ("query_issi_out.current_issi", 80, 16),
    ("query_issi_out.status", 0, 8),
    ("query_issi_out.supported_issi_dw0", 864, 32),
    ("query_issi_out.syndrome", 32, 32),
    ("query_nic_vport_context_in.op_mod", 48, 16),
    ("query_nic_vport_context_in.opcode", 0, 16),
    ("query_nic_vport_context_out.nic_vport_context.roce_en", 159, 1),
    ("query_nic_vport_context_out.status", 0, 8),
    ("query_nic_vport_context_out.syndrome", 32, 32),
    ("query_pages_in.function_id", 80, 16),
    ("query_pages_in.op_mod", 48, 16),
    ("query_pages_in.opcode", 0, 16),
    ("query_pages_out.embedded_cpu_function", 64, 1),
    ("query_pages_out.function_id", 80, 16),
    ("query_pages_out.num_pages", 96, 32),
    ("query_pages_out.status", 0, 8),
    ("query_pages_out.syndrome", 32, 32),
    ("roce_addr_layout.roce_l3_type", 212, 4),
    ("roce_addr_layout.roce_version", 216, 8),
    ("roce_addr_layout.source_l3_address", 0, 128),
    ("roce_addr_layout.source_mac_31_0", 160, 32),
    ("roce_addr_layout.source_mac_47_32", 144, 16),
    ("roce_addr_layout.vlan_id", 132, 12),
    ("roce_addr_layout.vlan_valid", 131, 1),
    ("roce_cap.fl_rc_qp_when_roce_disabled", 5, 1),
    ("roce_cap.fl_rc_qp_when_roce_enabled", 6, 1),
    ("roce_cap.qp_ts_format", 30, 2),
    ("roce_cap.sw_r_roce_src_udp_port", 4, 1),
    ("rst2init_qp_in.op_mod", 48, 16),
    ("rst2init_qp_in.opcode", 0, 16),
    ("rst2init_qp_in.opt_param_mask", 128, 32),
    ("rst2init_qp_in.qpc.cqn_rcv", 1448, 24),
    ("rst2init_qp_in.qpc.cqn_snd", 1192, 24),
    ("rst2init_qp_in.qpc.log_sra_max", 1096, 3),
    ("rst2init_qp_in.qpc.next_send_psn", 1160, 24),
    ("rst2init_qp_in.qpc.pd", 232, 24),
    ("rst2init_qp_in.qpc.pm_state", 211, 2),
    ("rst2init_qp_in.qpc.primary_address_path.ack_timeout", 448, 5),
    ("rst2init_qp_in.qpc.primary_address_path.dei_cfi", 672, 1),
    ("rst2init_qp_in.qpc.primary_address_path.dscp", 650, 6),
    ("rst2init_qp_in.qpc.primary_address_path.ecn", 648, 2),
    ("rst2init_qp_in.qpc.primary_address_path.eth_prio", 673, 3),
    ("rst2init_qp_in.qpc.primary_address_path.f_dscp", 644, 1),
    ("rst2init_qp_in.qpc.primary_address_path.f_ecn", 645, 1),
    ("rst2init_qp_in.qpc.primary_address_path.f_eth_prio", 647, 1),
    ("rst2init_qp_in.qpc.primary_address_path.fl", 384, 1),
    ("rst2init_qp_in.qpc.primary_address_path.flow_label", 492, 20),
    ("rst2init_qp_in.qpc.primary_address_path.free_ar", 385, 1),
    ("rst2init_qp_in.qpc.primary_address_path.grh", 424, 1),
    ("rst2init_qp_in.qpc.primary_address_path.hop_limit", 472, 8),
    ("rst2init_qp_in.qpc.primary_address_path.mlid", 425, 7),
    ("rst2init_qp_in.qpc.primary_address_path.pkey_index", 400, 16),
    ("rst2init_qp_in.qpc.primary_address_path.rgid_rip", 512, 128),
    ("rst2init_qp_in.qpc.primary_address_path.rlid", 432, 16),
    ("rst2init_qp_in.qpc.primary_address_path.rmac_31_0", 704, 32),
    ("rst2init_qp_in.qpc.primary_address_path.rmac_47_32", 688, 16),
    ("rst2init_qp_in.qpc.primary_address_path.sl", 676, 4),
    ("rst2init_qp_in.qpc.primary_address_path.src_addr_index", 456, 8),
    ("rst2init_qp_in.qpc.primary_address_path.stat_rate", 468, 4),
    ("rst2init_qp_in.qpc.primary_address_path.tclass", 484, 8),
    ("rst2init_qp_in.qpc.primary_address_path.udp_sport", 656, 16),
    ("rst2init_qp_in.qpc.primary_address_path.vhca_port_num", 680, 8),
    ("rst2init_qp_in.qpc.q_key", 1536, 32),
    ("rst2init_qp_in.qpc.rae", 1362, 1),
    ("rst2init_qp_in.qpc.retry_count", 1101, 3),
    ("rst2init_qp_in.qpc.rlky", 283, 1),
    ("rst2init_qp_in.qpc.rnr_retry", 1104, 3),
    ("rst2init_qp_in.qpc.rre", 1360, 1),
    ("rst2init_qp_in.qpc.rwe", 1361, 1),
    ("rst2init_qp_in.qpc.st", 200, 8),
    ("rst2init_qp_in.qpn", 72, 24),
    ("rst2init_qp_in.uid", 16, 16),
    ("rst2init_qp_out.status", 0, 8),
    ("rst2init_qp_out.syndrome", 32, 32),
    ("rtr2rts_qp_in.op_mod", 48, 16),
    ("rtr2rts_qp_in.opcode", 0, 16),
    ("rtr2rts_qp_in.opt_param_mask", 128, 32),
    ("rtr2rts_qp_in.qpc.cqn_rcv", 1448, 24),
    ("rtr2rts_qp_in.qpc.cqn_snd", 1192, 24),
    ("rtr2rts_qp_in.qpc.log_sra_max", 1096, 3),
    ("rtr2rts_qp_in.qpc.next_send_psn", 1160, 24),
    ("rtr2rts_qp_in.qpc.pd", 232, 24),
    ("rtr2rts_qp_in.qpc.pm_state", 211, 2),
    ("rtr2rts_qp_in.qpc.primary_address_path.ack_timeout", 448, 5),
    ("rtr2rts_qp_in.qpc.primary_address_path.dei_cfi", 672, 1),
    ("rtr2rts_qp_in.qpc.primary_address_path.dscp", 650, 6),
    ("rtr2rts_qp_in.qpc.primary_address_path.ecn", 648, 2),
    ("rtr2rts_qp_in.qpc.primary_address_path.eth_prio", 673, 3),
    ("rtr2rts_qp_in.qpc.primary_address_path.f_dscp", 644, 1),
    ("rtr2rts_qp_in.qpc.primary_address_path.f_ecn", 645, 1),
    ("rtr2rts_qp_in.qpc.primary_address_path.f_eth_prio", 647, 1),
    ("rtr2rts_qp_in.qpc.primary_address_path.fl", 384, 1),
    ("rtr2rts_qp_in.qpc.primary_address_path.flow_label", 492, 20),
    ("rtr2rts_qp_in.qpc.primary_address_path.free_ar", 385, 1),
    ("rtr2rts_qp_in.qpc.primary_address_path.grh", 424, 1),
    ("rtr2rts_qp_in.qpc.primary_address_path.hop_limit", 472, 8),
    ("rtr2rts_qp_in.qpc.primary_address_path.mlid", 425, 7),
    ("rtr2rts_qp_in.qpc.primary_address_path.pkey_index", 400, 16),
    ("rtr2rts_qp_in.qpc.primary_address_path.rgid_rip", 512, 128),
    ("rtr2rts_qp_in.qpc.primary_address_path.rlid", 432, 16),
    ("rtr2rts_qp_in.qpc.primary_address_path.rmac_31_0", 704, 32),
    ("rtr2rts_qp_in.qpc.primary_address_path.rmac_47_32", 688, 16),
    ("rtr2rts_qp_in.qpc.primary_address_path.sl", 676, 4),
    ("rtr2rts_qp_in.qpc.primary_address_path.src_addr_index", 456, 8),
    ("rtr2rts_qp_in.qpc.primary_address_path.stat_rate", 468, 4),
    ("rtr2rts_qp_in.qpc.primary_address_path.tclass", 484, 8),
    ("rtr2rts_qp_in.qpc.primary_address_path.udp_sport", 656, 16),
    ("rtr2rts_qp_in.qpc.primary_address_path.vhca_port_num", 680, 8),
    ("rtr2rts_qp_in.qpc.q_key", 1536, 32),
    ("rtr2rts_qp_in.qpc.rae", 1362, 1),
    ("rtr2rts_qp_in.qpc.retry_count", 1101, 3),
    ("rtr2rts_qp_in.qpc.rlky", 283, 1),
    ("rtr2rts_qp_in.qpc.rnr_retry", 1104, 3),
    ("rtr2rts_qp_in.qpc.rre", 1360, 1),
    ("rtr2rts_qp_in.qpc.rwe", 1361, 1),
    ("rtr2rts_qp_in.qpc.st", 200, 8),
    ("rtr2rts_qp_in.qpn", 72, 24),
    ("rtr2rts_qp_in.uid", 16, 16),
    ("rtr2rts_qp_out.status", 0, 8),
    ("rtr2rts_qp_out.syndrome", 32, 32),
    ("set_hca_cap_in.capability", 128, 32768),
    ("set_hca_cap_in.function_id", 80, 16),
    ("set_hca_cap_in.op_mod", 48, 16),
    ("set_hca_cap_in.opcode", 0, 16),
    ("set_hca_cap_in.other_function", 64, 1),
    ("set_hca_cap_out.status", 0, 8),
    ("set_hca_cap_out.syndrome", 32, 32),
    ("set_issi_in.current_issi", 80, 16),
    ("set_issi_in.op_mod", 48, 16),
    ("set_issi_in.opcode", 0, 16),
    ("set_issi_out.status", 0, 8),
    ("set_issi_out.syndrome", 32, 32),
    ("teardown_hca_in.op_mod", 48, 16),
    ("teardown_hca_in.opcode", 0, 16),
    ("teardown_hca_in.profile", 80, 16),
    ("teardown_hca_out.state", 127, 1),
    ("teardown_hca_out.status", 0, 8),
    ("teardown_hca_out.syndrome", 32, 32),
];

const FROM_LINUX_2017: &[(&str, u32, u32)] = &[
    // Structs the emulated adapter reads (same header; numbers as in rdma-core mlx5_ifc.h where
    // it has them): ACCESS_REG HOST_ENDIANNESS data, QUERY_ROCE_ADDRESS, QUERY_CQ, QUERY_QP.
    ("host_endianness_reg.he", 0, 1),
    ("query_roce_address_in.opcode", 0, 16),
    ("query_roce_address_in.op_mod", 48, 16),
    ("query_roce_address_in.roce_address_index", 64, 16),
    ("query_roce_address_in.vhca_port_num", 92, 4),
    ("query_roce_address_out.roce_address.source_l3_address", 128, 128),
    ("set_roce_address_in.vhca_port_num", 92, 4),
    ("query_cq_in.cqn", 72, 24),
    ("query_cq_out.cq_context.log_cq_size", 227, 5),
    ("query_cq_out.pas", 2176, 64),
    ("query_qp_in.qpn", 72, 24),
    ("query_qp_out.opt_param_mask", 128, 32),
    ("query_qp_out.qpc.state", 192, 4),
    ("query_qp_out.pas", 2176, 64),
    ("alloc_transport_domain_in.op_mod", 48, 16),
    ("alloc_transport_domain_in.opcode", 0, 16),
    ("alloc_transport_domain_out.status", 0, 8),
    ("alloc_transport_domain_out.syndrome", 32, 32),
    ("cqc.c_eqn", 184, 8),
    ("cqc.cc", 11, 1),
    ("cqc.consumer_counter", 328, 24),
    ("cqc.cq_max_count", 144, 16),
    ("cqc.cq_period", 132, 12),
    ("cqc.cq_period_mode", 15, 2),
    ("cqc.cqe_comp_en", 17, 1),
    ("cqc.cqe_sz", 8, 3),
    ("cqc.dbr_addr", 448, 64),
    ("cqc.last_notified_index", 264, 24),
    ("cqc.last_solicit_index", 296, 24),
    ("cqc.log_cq_size", 99, 5),
    ("cqc.log_page_size", 195, 5),
    ("cqc.mini_cqe_res_format", 18, 2),
    ("cqc.oi", 14, 1),
    ("cqc.page_offset", 84, 6),
    ("cqc.producer_counter", 360, 24),
    ("cqc.scqe_break_moderation_en", 13, 1),
    ("cqc.st", 20, 4),
    ("cqc.status", 0, 4),
    ("cqc.uar_page", 104, 24),
    ("create_cq_in.cq_context.c_eqn", 312, 8),
    ("create_cq_in.cq_context.cc", 139, 1),
    ("create_cq_in.cq_context.consumer_counter", 456, 24),
    ("create_cq_in.cq_context.cq_max_count", 272, 16),
    ("create_cq_in.cq_context.cq_period", 260, 12),
    ("create_cq_in.cq_context.cq_period_mode", 143, 2),
    ("create_cq_in.cq_context.cqe_comp_en", 145, 1),
    ("create_cq_in.cq_context.cqe_sz", 136, 3),
    ("create_cq_in.cq_context.dbr_addr", 576, 64),
    ("create_cq_in.cq_context.last_notified_index", 392, 24),
    ("create_cq_in.cq_context.last_solicit_index", 424, 24),
    ("create_cq_in.cq_context.log_cq_size", 227, 5),
    ("create_cq_in.cq_context.log_page_size", 323, 5),
    ("create_cq_in.cq_context.mini_cqe_res_format", 146, 2),
    ("create_cq_in.cq_context.oi", 142, 1),
    ("create_cq_in.cq_context.page_offset", 212, 6),
    ("create_cq_in.cq_context.producer_counter", 488, 24),
    ("create_cq_in.cq_context.scqe_break_moderation_en", 141, 1),
    ("create_cq_in.cq_context.st", 148, 4),
    ("create_cq_in.cq_context.status", 128, 4),
    ("create_cq_in.cq_context.uar_page", 232, 24),
    ("create_cq_in.op_mod", 48, 16),
    ("create_cq_in.opcode", 0, 16),
    ("create_cq_in.pas", 2176, 64),
    ("create_cq_out.status", 0, 8),
    ("create_cq_out.syndrome", 32, 32),
    ("dealloc_transport_domain_in.op_mod", 48, 16),
    ("dealloc_transport_domain_out.status", 0, 8),
    ("dealloc_transport_domain_out.syndrome", 32, 32),
    ("destroy_cq_in.op_mod", 48, 16),
    ("destroy_cq_out.status", 0, 8),
    ("destroy_cq_out.syndrome", 32, 32),
    ("destroy_qp_in.op_mod", 48, 16),
    ("destroy_qp_out.status", 0, 8),
    ("destroy_qp_out.syndrome", 32, 32),
    ("disable_hca_in.function_id", 80, 16),
    ("disable_hca_in.op_mod", 48, 16),
    ("disable_hca_in.opcode", 0, 16),
    ("disable_hca_out.status", 0, 8),
    ("disable_hca_out.syndrome", 32, 32),
    ("modify_nic_vport_context_in.nic_vport_context.mtu", 2352, 16),
    ("modify_nic_vport_context_in.nic_vport_context.permanent_address.mac_addr_31_0", 4032, 32),
    ("modify_nic_vport_context_in.nic_vport_context.permanent_address.mac_addr_47_32", 4016, 16),
    ("modify_nic_vport_context_in.nic_vport_context.promisc_all", 3970, 1),
    ("modify_nic_vport_context_in.nic_vport_context.promisc_mc", 3969, 1),
    ("modify_nic_vport_context_in.nic_vport_context.promisc_uc", 3968, 1),
    ("nic_vport_context.allowed_list_size", 1940, 12),
    ("nic_vport_context.allowed_list_type", 1925, 3),
    ("nic_vport_context.arm_change_event", 32, 1),
    ("nic_vport_context.disable_mc_local_lb", 29, 1),
    ("nic_vport_context.disable_uc_local_lb", 30, 1),
    ("nic_vport_context.event_on_mc_address_change", 62, 1),
    ("nic_vport_context.event_on_mtu", 59, 1),
    ("nic_vport_context.event_on_promisc_change", 60, 1),
    ("nic_vport_context.event_on_uc_address_change", 63, 1),
    ("nic_vport_context.event_on_vlan_change", 61, 1),
    ("nic_vport_context.min_wqe_inline_mode", 5, 3),
    ("nic_vport_context.mtu", 304, 16),
    ("nic_vport_context.node_guid", 448, 64),
    ("nic_vport_context.permanent_address.mac_addr_31_0", 1984, 32),
    ("nic_vport_context.permanent_address.mac_addr_47_32", 1968, 16),
    ("nic_vport_context.port_guid", 384, 64),
    ("nic_vport_context.promisc_all", 1922, 1),
    ("nic_vport_context.promisc_mc", 1921, 1),
    ("nic_vport_context.promisc_uc", 1920, 1),
    ("nic_vport_context.qkey_violation_counter", 832, 16),
    ("nic_vport_context.system_image_guid", 320, 64),
    ("qp_2err_in.op_mod", 48, 16),
    ("qp_2err_in.opcode", 0, 16),
    ("qp_2err_in.qpn", 72, 24),
    ("qp_2err_out.status", 0, 8),
    ("qp_2err_out.syndrome", 32, 32),
    ("qp_2rst_in.op_mod", 48, 16),
    ("qp_2rst_in.opcode", 0, 16),
    ("qp_2rst_in.qpn", 72, 24),
    ("qp_2rst_out.status", 0, 8),
    ("qp_2rst_out.syndrome", 32, 32),
    ("query_nic_vport_context_in.allowed_list_type", 101, 3),
    ("query_nic_vport_context_in.other_vport", 64, 1),
    ("query_nic_vport_context_in.vport_number", 80, 16),
    ("query_nic_vport_context_out.nic_vport_context.min_wqe_inline_mode", 133, 3),
    ("query_nic_vport_context_out.nic_vport_context.mtu", 432, 16),
    ("query_nic_vport_context_out.nic_vport_context.permanent_address.mac_addr_31_0", 2112, 32),
    ("query_nic_vport_context_out.nic_vport_context.permanent_address.mac_addr_47_32", 2096, 16),
    // query_vport_state_in/out (Linux include/linux/mlx5/mlx5_ifc.h, every version since 2015).
    ("query_vport_state_in.opcode", 0, 16),
    ("query_vport_state_in.op_mod", 48, 16),
    ("query_vport_state_in.other_vport", 64, 1),
    ("query_vport_state_in.vport_number", 80, 16),
    ("query_vport_state_out.status", 0, 8),
    ("query_vport_state_out.syndrome", 32, 32),
    ("query_vport_state_out.admin_state", 120, 4),
    ("query_vport_state_out.state", 124, 4),
    ("query_special_contexts_in.op_mod", 48, 16),
    ("query_special_contexts_in.opcode", 0, 16),
    ("query_special_contexts_out.dump_fill_mkey", 64, 32),
    ("query_special_contexts_out.null_mkey", 128, 32),
    ("query_special_contexts_out.resd_lkey", 96, 32),
    ("query_special_contexts_out.status", 0, 8),
    ("query_special_contexts_out.syndrome", 32, 32),
    ("roce_cap.l3_type", 140, 4),
    ("roce_cap.r_roce_dest_udp_port", 176, 16),
    ("roce_cap.r_roce_max_src_udp_port", 192, 16),
    ("roce_cap.r_roce_min_src_udp_port", 208, 16),
    ("roce_cap.roce_address_table_size", 240, 16),
    ("roce_cap.roce_apm", 0, 1),
    ("roce_cap.roce_version", 152, 8),
    ("set_roce_address_in.op_mod", 48, 16),
    ("set_roce_address_in.opcode", 0, 16),
    ("set_roce_address_in.roce_address.roce_l3_type", 340, 4),
    ("set_roce_address_in.roce_address.roce_version", 344, 8),
    ("set_roce_address_in.roce_address.source_l3_address", 128, 128),
    ("set_roce_address_in.roce_address.source_mac_31_0", 288, 32),
    ("set_roce_address_in.roce_address.source_mac_47_32", 272, 16),
    ("set_roce_address_in.roce_address.vlan_id", 260, 12),
    ("set_roce_address_in.roce_address.vlan_valid", 259, 1),
    ("set_roce_address_in.roce_address_index", 64, 16),
    ("set_roce_address_out.status", 0, 8),
    ("set_roce_address_out.syndrome", 32, 32),
];

/// RMP (shared receive queue) commands and the SRQ WQE's next segment: Linux
/// `include/linux/mlx5/mlx5_ifc.h` (mlx5_ifc_rmpc_bits, *_rmp_in/out_bits) and `qp.h`
/// (struct mlx5_wqe_srq_next_seg: rsvd0[2], __be16 next_wqe_index, u8 signature).
const RMP: &[(&str, u32, u32)] = &[
    ("rmpc.state", 8, 4),
    ("rmpc.basic_cyclic_rcv_wqe", 32, 1),
    ("rmpc.wq.lwm", 0x180 + 48, 16),
    ("create_rmp_in.opcode", 0, 16),
    ("create_rmp_in.ctx.state", 0x100 + 8, 4),
    ("create_rmp_in.ctx.wq.wq_type", 0x100 + 0x180, 4),
    ("create_rmp_in.ctx.wq.lwm", 0x100 + 0x180 + 48, 16),
    ("create_rmp_in.ctx.wq.log_wq_sz", 0x100 + 0x180 + 0x100 + 27, 5),
    ("create_rmp_in.ctx.wq.pas.pa_h", 0x100 + 0x180 + 0x600, 32),
    ("create_rmp_out.rmpn", 72, 24),
    ("modify_rmp_in.rmp_state", 64, 4),
    ("modify_rmp_in.rmpn", 72, 24),
    ("modify_rmp_in.bitmask.lwm", 0x80 + 0x3f, 1),
    ("modify_rmp_in.ctx.wq.lwm", 0x100 + 0x180 + 48, 16),
    ("destroy_rmp_in.rmpn", 72, 24),
    ("query_rmp_in.rmpn", 72, 24),
    ("query_rmp_out.rmp_context.state", 0x100 + 8, 4),
    ("wqe_srq_next_seg.next_wqe_index", 16, 16),
    ("wqe_srq_next_seg.signature", 32, 8),
];

#[test]
fn rmp_structs_match_public_headers() {
    let bad = check(RMP);
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
}

/// Raw Ethernet and steering commands (A = rdma-core, B = Linux 2017 copy, same commits as above).
const RAW_ETH: &[(&str, u32, u32)] = &[
    ("sqc.ts_format", 26, 2), // A
    ("rqc.ts_format", 26, 2), // A
    ("create_flow_group_in.end_flow_index", 288, 32), // B
    ("create_flow_group_in.match_criteria.outer_headers.dmac_47_16", 576, 32), // B
    ("create_flow_group_in.match_criteria.outer_headers.ethertype", 560, 16), // B
    ("create_flow_group_in.match_criteria.outer_headers.ip_protocol", 640, 8), // B
    ("create_flow_group_in.match_criteria.outer_headers.udp_dport", 752, 16), // B
    ("create_flow_group_in.match_criteria_enable", 504, 8), // B
    ("create_flow_group_in.op_mod", 48, 16), // B
    ("create_flow_group_in.opcode", 0, 16), // A
    ("create_flow_group_in.other_vport", 64, 1), // A
    ("create_flow_group_in.start_flow_index", 224, 32), // B
    ("create_flow_group_in.table_id", 168, 24), // A
    ("create_flow_group_in.table_type", 128, 8), // A
    ("create_flow_group_in.vport_number", 80, 16), // A
    ("create_flow_group_out.group_id", 72, 24), // A
    ("create_flow_group_out.status", 0, 8), // A
    ("create_flow_group_out.syndrome", 32, 32), // A
    ("create_flow_table_in.flow_table_context.decap_en", 193, 1), // A
    ("create_flow_table_in.flow_table_context.lag_master_next_table_id", 264, 24), // A
    ("create_flow_table_in.flow_table_context.level", 200, 8), // A
    ("create_flow_table_in.flow_table_context.log_size", 216, 8), // A
    ("create_flow_table_in.flow_table_context.reformat_en", 192, 1), // A
    ("create_flow_table_in.flow_table_context.sw_owner", 194, 1), // A
    ("create_flow_table_in.flow_table_context.sw_owner_icm_root_0", 448, 64), // A
    ("create_flow_table_in.flow_table_context.sw_owner_icm_root_1", 384, 64), // A
    ("create_flow_table_in.flow_table_context.table_miss_action", 196, 4), // A
    ("create_flow_table_in.flow_table_context.table_miss_id", 232, 24), // A
    ("create_flow_table_in.flow_table_context.termination_table", 195, 1), // A
    ("create_flow_table_in.op_mod", 48, 16), // A
    ("create_flow_table_in.opcode", 0, 16), // A
    ("create_flow_table_in.other_vport", 64, 1), // A
    ("create_flow_table_in.table_type", 128, 8), // A
    ("create_flow_table_in.uid", 16, 16), // A
    ("create_flow_table_in.vport_number", 80, 16), // A
    ("create_flow_table_out.icm_address_31_0", 96, 32), // A
    ("create_flow_table_out.icm_address_39_32", 64, 8), // A
    ("create_flow_table_out.icm_address_63_40", 8, 24), // A
    ("create_flow_table_out.status", 0, 8), // A
    ("create_flow_table_out.syndrome", 32, 32), // A
    ("create_flow_table_out.table_id", 72, 24), // A
    ("create_rq_in.ctx.counter_set_id", 352, 8), // B
    ("create_rq_in.ctx.cqn", 328, 24), // B
    ("create_rq_in.ctx.delay_drop_en", 257, 1), // B
    ("create_rq_in.ctx.flush_in_error_en", 269, 1), // B
    ("create_rq_in.ctx.mem_rq_type", 260, 4), // B
    ("create_rq_in.ctx.rlky", 256, 1), // B
    ("create_rq_in.ctx.rmpn", 392, 24), // B
    ("create_rq_in.ctx.scatter_fcs", 258, 1), // B
    ("create_rq_in.ctx.state", 264, 4), // B
    ("create_rq_in.ctx.user_index", 296, 24), // B
    ("create_rq_in.ctx.vsd", 259, 1), // B
    ("create_rq_in.ctx.wq.cd_slave", 647, 1), // B
    ("create_rq_in.ctx.wq.dbr_addr", 768, 64), // B
    ("create_rq_in.ctx.wq.end_padding_mode", 645, 2), // B
    ("create_rq_in.ctx.wq.hds_skip_first_sge", 672, 1), // B
    ("create_rq_in.ctx.wq.hw_counter", 832, 32), // B
    ("create_rq_in.ctx.wq.log2_hds_buf_size", 673, 3), // B
    ("create_rq_in.ctx.wq.log_wq_pg_sz", 915, 5), // B
    ("create_rq_in.ctx.wq.log_wq_stride", 908, 4), // B
    ("create_rq_in.ctx.wq.log_wq_sz", 923, 5), // B
    ("create_rq_in.ctx.wq.log_wqe_num_of_strides", 949, 3), // B
    ("create_rq_in.ctx.wq.log_wqe_stride_size", 957, 3), // B
    ("create_rq_in.ctx.wq.lwm", 688, 16), // B
    ("create_rq_in.ctx.wq.page_offset", 683, 5), // B
    ("create_rq_in.ctx.wq.pas.pa_h", 2176, 32), // B
    ("create_rq_in.ctx.wq.pas.pa_l", 2208, 20), // B
    ("create_rq_in.ctx.wq.pd", 712, 24), // B
    ("create_rq_in.ctx.wq.sw_counter", 864, 32), // B
    ("create_rq_in.ctx.wq.two_byte_shift_en", 952, 1), // B
    ("create_rq_in.ctx.wq.uar_page", 744, 24), // B
    ("create_rq_in.ctx.wq.wq_signature", 644, 1), // B
    ("create_rq_in.ctx.wq.wq_type", 640, 4), // B
    ("create_rq_in.op_mod", 48, 16), // B
    ("create_rq_in.opcode", 0, 16), // B
    ("create_rq_out.rqn", 72, 24), // A
    ("create_rq_out.status", 0, 8), // B
    ("create_rq_out.syndrome", 32, 32), // B
    ("create_sq_in.ctx.allow_multi_pkt_send_wqe", 260, 1), // B
    ("create_sq_in.ctx.allow_swp", 269, 1), // B
    ("create_sq_in.ctx.cd_master", 257, 1), // B
    ("create_sq_in.ctx.cqn", 328, 24), // B
    ("create_sq_in.ctx.flush_in_error_en", 259, 1), // B
    ("create_sq_in.ctx.fre", 258, 1), // B
    ("create_sq_in.ctx.min_wqe_inline_mode", 261, 3), // B
    ("create_sq_in.ctx.packet_pacing_rate_limit_index", 496, 16), // B
    ("create_sq_in.ctx.reg_umr", 268, 1), // B
    ("create_sq_in.ctx.rlky", 256, 1), // B
    ("create_sq_in.ctx.state", 264, 4), // B
    ("create_sq_in.ctx.tis_lst_sz", 512, 16), // B
    ("create_sq_in.ctx.tis_num_0", 616, 24), // B
    ("create_sq_in.ctx.user_index", 296, 24), // B
    ("create_sq_in.ctx.wq.cd_slave", 647, 1), // B
    ("create_sq_in.ctx.wq.dbr_addr", 768, 64), // B
    ("create_sq_in.ctx.wq.end_padding_mode", 645, 2), // B
    ("create_sq_in.ctx.wq.hds_skip_first_sge", 672, 1), // B
    ("create_sq_in.ctx.wq.hw_counter", 832, 32), // B
    ("create_sq_in.ctx.wq.log2_hds_buf_size", 673, 3), // B
    ("create_sq_in.ctx.wq.log_wq_pg_sz", 915, 5), // B
    ("create_sq_in.ctx.wq.log_wq_stride", 908, 4), // B
    ("create_sq_in.ctx.wq.log_wq_sz", 923, 5), // B
    ("create_sq_in.ctx.wq.log_wqe_num_of_strides", 949, 3), // B
    ("create_sq_in.ctx.wq.log_wqe_stride_size", 957, 3), // B
    ("create_sq_in.ctx.wq.lwm", 688, 16), // B
    ("create_sq_in.ctx.wq.page_offset", 683, 5), // B
    ("create_sq_in.ctx.wq.pas.pa_h", 2176, 32), // B
    ("create_sq_in.ctx.wq.pas.pa_l", 2208, 20), // B
    ("create_sq_in.ctx.wq.pd", 712, 24), // B
    ("create_sq_in.ctx.wq.sw_counter", 864, 32), // B
    ("create_sq_in.ctx.wq.two_byte_shift_en", 952, 1), // B
    ("create_sq_in.ctx.wq.uar_page", 744, 24), // B
    ("create_sq_in.ctx.wq.wq_signature", 644, 1), // B
    ("create_sq_in.ctx.wq.wq_type", 640, 4), // B
    ("create_sq_in.op_mod", 48, 16), // B
    ("create_sq_in.opcode", 0, 16), // B
    ("create_sq_out.sqn", 72, 24), // A
    ("create_sq_out.status", 0, 8), // B
    ("create_sq_out.syndrome", 32, 32), // B
    ("create_tir_in.ctx.disp_type", 288, 4), // B
    ("create_tir_in.ctx.indirect_table", 520, 24), // B
    ("create_tir_in.ctx.inline_rqn", 488, 24), // B
    ("create_tir_in.ctx.lro_enable_mask", 404, 4), // B
    ("create_tir_in.ctx.lro_max_ip_payload_size", 408, 8), // B
    ("create_tir_in.ctx.lro_timeout_period_usecs", 388, 16), // B
    ("create_tir_in.ctx.rx_hash_field_selector_inner.l3_prot_type", 928, 1), // B
    ("create_tir_in.ctx.rx_hash_field_selector_inner.l4_prot_type", 929, 1), // B
    ("create_tir_in.ctx.rx_hash_field_selector_inner.selected_fields", 930, 30), // B
    ("create_tir_in.ctx.rx_hash_field_selector_outer.l3_prot_type", 896, 1), // B
    ("create_tir_in.ctx.rx_hash_field_selector_outer.l4_prot_type", 897, 1), // B
    ("create_tir_in.ctx.rx_hash_field_selector_outer.selected_fields", 898, 30), // B
    ("create_tir_in.ctx.rx_hash_fn", 544, 4), // B
    ("create_tir_in.ctx.rx_hash_symmetric", 512, 1), // B
    ("create_tir_in.ctx.rx_hash_toeplitz_key", 576, 320), // B
    ("create_tir_in.ctx.self_lb_block", 550, 2), // B
    ("create_tir_in.ctx.transport_domain", 552, 24), // B
    ("create_tir_in.ctx.tunneled_offload_en", 514, 1), // B
    ("create_tir_in.op_mod", 48, 16), // B
    ("create_tir_in.opcode", 0, 16), // B
    ("create_tir_out.icm_address_31_0", 96, 32), // A
    ("create_tir_out.icm_address_39_32", 64, 8), // A
    ("create_tir_out.icm_address_63_40", 8, 24), // A
    ("create_tir_out.status", 0, 8), // A
    ("create_tir_out.syndrome", 32, 32), // A
    ("create_tir_out.tirn", 72, 24), // A
    ("create_tis_in.ctx.lag_tx_port_affinity", 260, 4), // B
    ("create_tis_in.ctx.prio", 268, 4), // B
    ("create_tis_in.ctx.strict_lag_tx_port_affinity", 256, 1), // B
    ("create_tis_in.ctx.transport_domain", 552, 24), // B
    ("create_tis_in.ctx.underlay_qpn", 584, 24), // B
    ("create_tis_in.op_mod", 48, 16), // B
    ("create_tis_in.opcode", 0, 16), // B
    ("create_tis_out.status", 0, 8), // B
    ("create_tis_out.syndrome", 32, 32), // B
    ("create_tis_out.tisn", 72, 24), // A
    ("delete_fte_in.flow_index", 256, 32), // A
    ("delete_fte_in.op_mod", 48, 16), // B
    ("delete_fte_in.opcode", 0, 16), // A
    ("delete_fte_in.other_vport", 64, 1), // A
    ("delete_fte_in.table_id", 168, 24), // A
    ("delete_fte_in.table_type", 128, 8), // A
    ("delete_fte_in.vport_number", 80, 16), // A
    ("destroy_flow_group_in.group_id", 192, 32), // A
    ("destroy_flow_group_in.op_mod", 48, 16), // B
    ("destroy_flow_group_in.opcode", 0, 16), // A
    ("destroy_flow_group_in.other_vport", 64, 1), // A
    ("destroy_flow_group_in.table_id", 168, 24), // A
    ("destroy_flow_group_in.table_type", 128, 8), // A
    ("destroy_flow_group_in.vport_number", 80, 16), // A
    ("destroy_flow_table_in.op_mod", 48, 16), // B
    ("destroy_flow_table_in.opcode", 0, 16), // A
    ("destroy_flow_table_in.other_vport", 64, 1), // A
    ("destroy_flow_table_in.table_id", 168, 24), // A
    ("destroy_flow_table_in.table_type", 128, 8), // A
    ("destroy_flow_table_in.vport_number", 80, 16), // A
    ("destroy_rq_in.op_mod", 48, 16), // B
    ("destroy_rq_in.opcode", 0, 16), // A
    ("destroy_rq_in.rqn", 72, 24), // A
    ("destroy_rq_in.uid", 16, 16), // A
    ("destroy_sq_in.op_mod", 48, 16), // B
    ("destroy_sq_in.opcode", 0, 16), // A
    ("destroy_sq_in.sqn", 72, 24), // A
    ("destroy_sq_in.uid", 16, 16), // A
    ("destroy_tir_in.op_mod", 48, 16), // B
    ("destroy_tir_in.opcode", 0, 16), // A
    ("destroy_tir_in.tirn", 72, 24), // A
    ("destroy_tir_in.uid", 16, 16), // A
    ("destroy_tis_in.op_mod", 48, 16), // B
    ("destroy_tis_in.opcode", 0, 16), // A
    ("destroy_tis_in.tisn", 72, 24), // A
    ("destroy_tis_in.uid", 16, 16), // A
    ("modify_rq_in.ctx.counter_set_id", 352, 8), // B
    ("modify_rq_in.ctx.cqn", 328, 24), // B
    ("modify_rq_in.ctx.delay_drop_en", 257, 1), // B
    ("modify_rq_in.ctx.flush_in_error_en", 269, 1), // B
    ("modify_rq_in.ctx.mem_rq_type", 260, 4), // B
    ("modify_rq_in.ctx.rlky", 256, 1), // B
    ("modify_rq_in.ctx.rmpn", 392, 24), // B
    ("modify_rq_in.ctx.scatter_fcs", 258, 1), // B
    ("modify_rq_in.ctx.state", 264, 4), // B
    ("modify_rq_in.ctx.user_index", 296, 24), // B
    ("modify_rq_in.ctx.vsd", 259, 1), // B
    ("modify_rq_in.ctx.wq.cd_slave", 647, 1), // B
    ("modify_rq_in.ctx.wq.dbr_addr", 768, 64), // B
    ("modify_rq_in.ctx.wq.end_padding_mode", 645, 2), // B
    ("modify_rq_in.ctx.wq.hds_skip_first_sge", 672, 1), // B
    ("modify_rq_in.ctx.wq.hw_counter", 832, 32), // B
    ("modify_rq_in.ctx.wq.log2_hds_buf_size", 673, 3), // B
    ("modify_rq_in.ctx.wq.log_wq_pg_sz", 915, 5), // B
    ("modify_rq_in.ctx.wq.log_wq_stride", 908, 4), // B
    ("modify_rq_in.ctx.wq.log_wq_sz", 923, 5), // B
    ("modify_rq_in.ctx.wq.log_wqe_num_of_strides", 949, 3), // B
    ("modify_rq_in.ctx.wq.log_wqe_stride_size", 957, 3), // B
    ("modify_rq_in.ctx.wq.lwm", 688, 16), // B
    ("modify_rq_in.ctx.wq.page_offset", 683, 5), // B
    ("modify_rq_in.ctx.wq.pas.pa_h", 2176, 32), // B
    ("modify_rq_in.ctx.wq.pas.pa_l", 2208, 20), // B
    ("modify_rq_in.ctx.wq.pd", 712, 24), // B
    ("modify_rq_in.ctx.wq.sw_counter", 864, 32), // B
    ("modify_rq_in.ctx.wq.two_byte_shift_en", 952, 1), // B
    ("modify_rq_in.ctx.wq.uar_page", 744, 24), // B
    ("modify_rq_in.ctx.wq.wq_signature", 644, 1), // B
    ("modify_rq_in.ctx.wq.wq_type", 640, 4), // B
    ("modify_rq_in.modify_bitmask", 128, 64), // B
    ("modify_rq_in.op_mod", 48, 16), // B
    ("modify_rq_in.opcode", 0, 16), // B
    ("modify_rq_in.rq_state", 64, 4), // B
    ("modify_rq_in.rqn", 72, 24), // B
    ("modify_sq_in.modify_bitmask", 128, 64), // A
    ("modify_sq_in.op_mod", 48, 16), // A
    ("modify_sq_in.opcode", 0, 16), // A
    ("modify_sq_in.sq_context.qos_queue_group_id", 528, 16), // A
    ("modify_sq_in.sq_context.state", 264, 4), // A
    ("modify_sq_in.sq_state", 64, 4), // A
    ("modify_sq_in.sqn", 72, 24), // A
    ("modify_sq_in.uid", 16, 16), // A
    ("set_flow_table_root_in.op_mod", 48, 16), // B
    ("set_flow_table_root_in.opcode", 0, 16), // B
    ("set_flow_table_root_in.other_vport", 64, 1), // B
    ("set_flow_table_root_in.table_id", 168, 24), // B
    ("set_flow_table_root_in.table_type", 128, 8), // B
    ("set_flow_table_root_in.underlay_qpn", 200, 24), // B
    ("set_flow_table_root_in.vport_number", 80, 16), // B
    ("set_fte_in.flow_context.action", 624, 16), // A
    ("set_fte_in.flow_context.destination", 6656, 64), // A
    ("set_fte_in.flow_context.destination_list_size", 648, 24), // A
    ("set_fte_in.flow_context.encap_id", 704, 32), // B
    ("set_fte_in.flow_context.extended_destination", 640, 1), // A
    ("set_fte_in.flow_context.flow_counter_list_size", 680, 24), // A
    ("set_fte_in.flow_context.flow_tag", 584, 24), // A
    ("set_fte_in.flow_context.group_id", 544, 32), // A
    ("set_fte_in.flow_context.match_value.outer_headers.dmac_47_16", 1088, 32), // B
    ("set_fte_in.flow_context.match_value.outer_headers.ethertype", 1072, 16), // B
    ("set_fte_in.flow_context.match_value.outer_headers.ip_protocol", 1152, 8), // B
    ("set_fte_in.flow_context.match_value.outer_headers.udp_dport", 1264, 16), // B
    ("set_fte_in.flow_context.modify_header_id", 736, 32), // B
    ("set_fte_in.flow_context.tpid", 512, 16), // B
    ("set_fte_in.flow_context.vlan_dei", 531, 1), // B
    ("set_fte_in.flow_context.vlan_id", 532, 12), // B
    ("set_fte_in.flow_context.vlan_pcp", 528, 3), // B
    ("set_fte_in.flow_index", 256, 32), // A
    ("set_fte_in.modify_enable_mask", 216, 8), // B
    ("set_fte_in.op_mod", 48, 16), // A
    ("set_fte_in.opcode", 0, 16), // A
    ("set_fte_in.other_vport", 64, 1), // A
    ("set_fte_in.table_id", 168, 24), // A
    ("set_fte_in.table_type", 128, 8), // A
    ("set_fte_in.vport_number", 80, 16), // A
];

const FROM_C_STRUCTS: &[(&str, u32, u32)] = &[
    // mlx5_init_seg: fw_rev @0, cmdif_rev_fw_sub @4, cmdq_addr_h @0x10, cmdq_addr_l_sz @0x14,
    // cmd_dbell @0x18, initializing @0x1fc, health @0x200, internal_timer_h @0x1000, health_counter @0x1010
    ("init_seg.fw_rev_minor", 0, 16),
    ("init_seg.fw_rev_major", 16, 16),
    ("init_seg.cmdif_rev", 32, 16),
    ("init_seg.cmdq_addr_h", 128, 32),
    ("init_seg.cmd_dbell", 192, 32),
    ("init_seg.initializing", 4064, 1),
    ("init_seg.health.fw_ver", 4480, 32),
    ("init_seg.health.hw_id", 4512, 32),
    ("init_seg.health.irisc_index", 4576, 8),
    ("init_seg.health.synd", 4584, 8),
    ("init_seg.health.ext_synd", 4592, 16),
    ("init_seg.internal_timer_h", 32768, 32),
    // health_counter: dword at 0x1010, low 24 bits
    ("init_seg.health_counter", 32904, 24),
    // mlx5_cmd_layout: type @0, ilen @4, iptr @8, in @0x10, out @0x20, optr @0x30, olen @0x38,
    // token @0x3c, sig @0x3d, status_own @0x3f
    ("cmd_layout.type", 0, 8),
    ("cmd_layout.ilen", 32, 32),
    ("cmd_layout.iptr", 64, 64),
    ("cmd_layout.in", 128, 128),
    ("cmd_layout.out", 256, 128),
    ("cmd_layout.optr", 384, 64),
    ("cmd_layout.olen", 448, 32),
    ("cmd_layout.token", 480, 8),
    ("cmd_layout.sig", 488, 8),
    ("cmd_layout.ownership", 511, 1),
    // mlx5_cmd_block: data[512], rsvd0[48], next @0x230, block_num @0x238, token @0x23d
    ("cmd_prot_block.data", 0, 4096),
    ("cmd_prot_block.next", 4480, 64),
    ("cmd_prot_block.block_num", 4544, 32),
    ("cmd_prot_block.token", 4584, 8),
    ("cmd_prot_block.ctrl_sig", 4592, 8),
    ("cmd_prot_block.sig", 4600, 8),
    // mlx5_eqe: type @1, sub_type @3, data @0x20, signature @0x3e, owner @0x3f
    ("eqe.type", 8, 8),
    ("eqe.sub_type", 24, 8),
    ("eqe.data", 256, 224),
    ("eqe.signature", 496, 8),
    ("eqe.owner", 504, 8),
    // mlx5_cqe64: byte_cnt @0x2c, sop_drop_qpn @0x38, wqe_counter @0x3c, signature @0x3e, op_own @0x3f
    ("cqe64.byte_cnt", 352, 32),
    ("cqe64.sop_drop_qpn", 448, 32),
    ("cqe64.wqe_counter", 480, 16),
    ("cqe64.op_own", 504, 8),
    // mlx5_wqe_ctrl_seg: opmod_idx_opcode @0, qpn_ds @4, signature @8, fm_ce_se @0xb, imm @0xc
    ("wqe_ctrl_seg.opmod", 0, 8),
    ("wqe_ctrl_seg.opcode", 24, 8),
    ("wqe_ctrl_seg.signature", 64, 8),
    ("wqe_ctrl_seg.fm_ce_se", 88, 8),
    ("wqe_ctrl_seg.imm", 96, 32),
    // mlx5_wqe_data_seg: byte_count @0, lkey @4, addr @8
    ("wqe_data_seg.byte_count", 0, 32),
    ("wqe_data_seg.lkey", 32, 32),
    ("wqe_data_seg.addr", 64, 64),
    // mlx5_wqe_umr_ctrl_seg: flags @0, xlt_octowords @4 (be16), xlt_offset @6, mkey_mask @8 (be64),
    // xlt_offset_47_16 @0x10, 48 bytes in all
    ("wqe_umr_ctrl_seg.flags", 0, 8),
    ("wqe_umr_ctrl_seg.xlt_octowords", 32, 16),
    ("wqe_umr_ctrl_seg.xlt_offset", 48, 16),
    ("wqe_umr_ctrl_seg.mkey_mask", 64, 64),
    ("wqe_umr_ctrl_seg.xlt_offset_47_16", 128, 32),
    ("wqe_raddr_seg.raddr", 0, 64),
    ("wqe_raddr_seg.rkey", 64, 32),
    // mlx5_av: qkey @0, dqp_dct @8, rmac @0x14, tclass @0x1a, hop_limit @0x1b, grh_gid_fl @0x1c, rgid @0x20
    ("wqe_av.qkey", 0, 32),
    ("wqe_av.dqp_dct", 64, 32),
    ("wqe_av.rmac", 160, 48),
    ("wqe_av.tclass", 208, 8),
    ("wqe_av.hop_limit", 216, 8),
    ("wqe_av.grh_gid_fl", 224, 32),
    ("wqe_av.rgid", 256, 128),
];

/// Queue counters: Linux `include/linux/mlx5/mlx5_ifc.h` (v6.12: `alloc_q_counter_{in,out}`,
/// `dealloc_q_counter_in`, `query_q_counter_{in,out}` with `req_rnr_retries_exceeded` at 0x380),
/// the same offsets in DPDK `drivers/common/mlx5/mlx5_prm.h`; `cmd_hca_cap.max_qp_cnt` (10 bits
/// after `rq_delay_drop`).
const Q_COUNTERS: &[(&str, u32, u32)] = &[
    ("cmd_hca_cap.max_qp_cnt", 390, 10),
    ("cmd_hca_cap.retransmission_q_counters", 386, 1),
    ("alloc_q_counter_in.opcode", 0, 16),
    ("alloc_q_counter_in.uid", 16, 16),
    ("alloc_q_counter_in.op_mod", 48, 16),
    ("alloc_q_counter_out.status", 0, 8),
    ("alloc_q_counter_out.syndrome", 32, 32),
    ("alloc_q_counter_out.counter_set_id", 88, 8),
    ("dealloc_q_counter_in.opcode", 0, 16),
    ("dealloc_q_counter_in.op_mod", 48, 16),
    ("dealloc_q_counter_in.counter_set_id", 88, 8),
    ("query_q_counter_in.opcode", 0, 16),
    ("query_q_counter_in.op_mod", 48, 16),
    ("query_q_counter_in.other_vport", 64, 1),
    ("query_q_counter_in.vport_number", 80, 16),
    ("query_q_counter_in.clear", 192, 1),
    ("query_q_counter_in.aggregate", 193, 1),
    ("query_q_counter_in.counter_set_id", 248, 8),
    ("query_q_counter_out.rx_write_requests", 0x80, 32),
    ("query_q_counter_out.rx_read_requests", 0xc0, 32),
    ("query_q_counter_out.rx_atomic_requests", 0x100, 32),
    ("query_q_counter_out.rx_dct_connect", 0x140, 32),
    ("query_q_counter_out.out_of_buffer", 0x180, 32),
    ("query_q_counter_out.out_of_sequence", 0x1c0, 32),
    ("query_q_counter_out.duplicate_request", 0x200, 32),
    ("query_q_counter_out.rnr_nak_retry_err", 0x240, 32),
    ("query_q_counter_out.packet_seq_err", 0x280, 32),
    ("query_q_counter_out.implied_nak_seq_err", 0x2c0, 32),
    ("query_q_counter_out.local_ack_timeout_err", 0x300, 32),
    ("query_q_counter_out.req_rnr_retries_exceeded", 0x380, 32),
    ("query_q_counter_out.resp_local_length_error", 0x3c0, 32),
    ("query_q_counter_out.req_local_length_error", 0x3e0, 32),
    ("query_q_counter_out.resp_local_qp_error", 0x400, 32),
    ("query_q_counter_out.local_operation_error", 0x420, 32),
    ("query_q_counter_out.resp_local_protection", 0x440, 32),
    ("query_q_counter_out.req_local_protection", 0x460, 32),
    ("query_q_counter_out.resp_cqe_error", 0x480, 32),
    ("query_q_counter_out.req_cqe_error", 0x4a0, 32),
    ("query_q_counter_out.req_mw_binding", 0x4c0, 32),
    ("query_q_counter_out.req_bad_response", 0x4e0, 32),
    ("query_q_counter_out.req_remote_invalid_request", 0x500, 32),
    ("query_q_counter_out.resp_remote_invalid_request", 0x520, 32),
    ("query_q_counter_out.req_remote_access_errors", 0x540, 32),
    ("query_q_counter_out.resp_remote_access_errors", 0x560, 32),
    ("query_q_counter_out.req_remote_operation_errors", 0x580, 32),
    ("query_q_counter_out.req_transport_retries_exceeded", 0x5a0, 32),
    ("query_q_counter_out.cq_overflow", 0x5c0, 32),
    ("query_q_counter_out.resp_cqe_flush_error", 0x5e0, 32),
    ("query_q_counter_out.req_cqe_flush_error", 0x600, 32),
];

fn check(table: &[(&str, u32, u32)]) -> Vec<String> {
    let mut bad = Vec::new();
    for &(name, off, width) in table {
        match layout::lookup(ifc::ALL, name) {
            None => bad.push(format!("{name}: not declared")),
            Some(f) if f.off != off || f.width != width => {
                bad.push(format!("{name}: declared ({} {}), header ({off} {width})", f.off, f.width))
            }
            Some(_) => {}
        }
    }
    bad
}

#[test]
fn ifc_fields_match_public_headers() {
    let total = FROM_RDMA_CORE.len() + FROM_LINUX_2017.len();
    assert!(total >= 150, "only {total} mlx5_ifc fields checked");
    let mut bad = check(FROM_RDMA_CORE);
    bad.extend(check(FROM_LINUX_2017));
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn raw_ethernet_structs_match_public_headers() {
    assert!(RAW_ETH.len() > 50);
    let bad = check(RAW_ETH);
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn queue_counter_structs_match_public_headers() {
    let bad = check(Q_COUNTERS);
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
    assert_eq!(ifc::query_q_counter_out::SIZE * 8, 0x800, "query_q_counter_out ends with reserved_at_620[0x1e0]");
}

#[test]
fn device_structs_match_public_headers() {
    let bad = check(FROM_C_STRUCTS);
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn every_command_the_bringup_uses_is_declared() {
    for s in [
        "enable_hca_in", "disable_hca_in", "query_issi_out", "set_issi_in", "query_pages_out",
        "manage_pages_in", "manage_pages_out", "query_hca_cap_in", "set_hca_cap_in", "cmd_hca_cap",
        "roce_cap", "init_hca_in", "teardown_hca_in", "access_register_in", "alloc_uar_out",
        "dealloc_uar_in", "create_eq_in", "destroy_eq_in", "eqc", "alloc_pd_out", "dealloc_pd_in",
        "alloc_transport_domain_out", "dealloc_transport_domain_in", "query_special_contexts_out",
        "create_mkey_in", "destroy_mkey_in", "mkc", "query_nic_vport_context_out",
        "modify_nic_vport_context_in", "set_roce_address_in", "roce_addr_layout", "create_cq_in",
        "destroy_cq_in", "cqc", "create_qp_in", "destroy_qp_in", "qpc", "ads", "rst2init_qp_in",
        "init2rtr_qp_in", "rtr2rts_qp_in", "qp_2err_in", "qp_2rst_in", "init_seg", "cmd_layout",
        "cmd_prot_block", "eqe", "cqe64", "wqe_ctrl_seg", "wqe_data_seg", "wqe_av",
    ] {
        assert!(ifc::ALL.iter().any(|l| l.name == s), "{s} missing");
    }
}

#[test]
fn lookup_rejects_unknown_names() {
    assert!(layout::lookup(ifc::ALL, "create_cq_in.cq_context.no_such").is_none());
    assert!(layout::lookup(ifc::ALL, "qpc.pd.extra").is_none());
    assert!(layout::lookup(ifc::ALL, "nonexistent.x").is_none());
}
