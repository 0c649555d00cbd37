//! The function and HCA bring-up commands [mlx5_ifc.h]: capabilities, ENABLE/DISABLE_HCA,
//! ISSI, pages, INIT/TEARDOWN_HCA, ACCESS_REG and its registers, UAR, PD, transport domain,
//! special contexts.

#[allow(unused_imports)]
use super::*;

layouts! {
    // ACCESS_REG register data (mlx5_ifc host_endianness_reg)
    host_endianness_reg [0x10] {
        he = F(0x00, 31, 31),
    }
    cmd_hca_cap [0x100] {
        vhca_resource_manager = F(0x00, 0, 0),
        log_max_srq_sz = F(0x10, 31, 24),
        log_max_qp_sz = F(0x10, 23, 16),
        log_max_qp = F(0x10, 4, 0),
        log_max_srq = F(0x14, 20, 16),
        log_max_cq_sz = F(0x18, 23, 16),
        log_max_cq = F(0x18, 4, 0),
        log_max_eq_sz = F(0x1c, 31, 24),
        log_max_mkey = F(0x1c, 21, 16),
        log_max_eq = F(0x1c, 3, 0),
        max_indirection = F(0x20, 31, 24),
        log_max_mrw_sz = F(0x20, 22, 16),
        force_teardown = F(0x20, 15, 15),
        fast_teardown = F(0x20, 14, 14),
        umr_extended_translation_offset = F(0x20, 7, 7),
        null_mkey = F(0x20, 6, 6),
        log_max_klm_list_size = F(0x20, 5, 0),
        log_max_ra_req_dc = F(0x24, 21, 16),
        log_max_ra_res_dc = F(0x24, 5, 0),
        log_max_ra_req_qp = F(0x28, 21, 16),
        log_max_ra_res_qp = F(0x28, 5, 0),
        end_pad = F(0x2c, 31, 31),
        cc_query_allowed = F(0x2c, 30, 30),
        cc_modify_allowed = F(0x2c, 29, 29),
        start_pad = F(0x2c, 28, 28),
        cache_line_128byte = F(0x2c, 27, 27),
        gid_table_size = F(0x2c, 15, 0),
        out_of_seq_cnt = F(0x30, 31, 31),
        vport_counters = F(0x30, 30, 30),
        retransmission_q_counters = F(0x30, 29, 29),
        max_qp_cnt = F(0x30, 25, 16),
        pkey_table_size = F(0x30, 15, 0),
        vport_group_manager = F(0x34, 31, 31),
        vhca_group_manager = F(0x34, 30, 30),
        ib_virt = F(0x34, 29, 29),
        eth_virt = F(0x34, 28, 28),
        vnic_env_queue_counters = F(0x34, 27, 27),
        ets = F(0x34, 26, 26),
        nic_flow_table = F(0x34, 25, 25),
        eswitch_manager = F(0x34, 24, 24),
        device_memory = F(0x34, 23, 23),
        mcam_reg = F(0x34, 22, 22),
        pcam_reg = F(0x34, 21, 21),
        local_ca_ack_delay = F(0x34, 20, 16),
        port_module_event = F(0x34, 15, 15),
        port_type = F(0x34, 9, 8),
        num_ports = F(0x34, 7, 0),
        log_max_msg = F(0x38, 28, 24),
        max_tc = F(0x38, 19, 16),
        temp_warn_event = F(0x38, 15, 15),
        dcbx = F(0x38, 14, 14),
        general_notification_event = F(0x38, 13, 13),
        rol_s = F(0x38, 9, 9),
        rol_g = F(0x38, 8, 8),
        wol_s = F(0x38, 6, 6),
        wol_g = F(0x38, 5, 5),
        wol_a = F(0x38, 4, 4),
        wol_b = F(0x38, 3, 3),
        wol_m = F(0x38, 2, 2),
        wol_u = F(0x38, 1, 1),
        wol_p = F(0x38, 0, 0),
        stat_rate_support = F(0x3c, 31, 16),
        cqe_version = F(0x3c, 3, 0),
        compact_address_vector = F(0x40, 31, 31),
        ipoib_enhanced_offloads = F(0x40, 28, 28),
        ipoib_basic_offloads = F(0x40, 27, 27),
        cmdif_checksum = F(0x40, 15, 14),
        sigerr_cqe = F(0x40, 13, 13),
        wq_signature = F(0x40, 11, 11),
        sctr_data_cqe = F(0x40, 10, 10),
        sho = F(0x40, 8, 8),
        tph = F(0x40, 7, 7),
        rf = F(0x40, 6, 6),
        dct = F(0x40, 5, 5),
        qos = F(0x40, 4, 4),
        eth_net_offloads = F(0x40, 3, 3),
        roce = F(0x40, 2, 2),
        atomic = F(0x40, 1, 1),
        cq_oi = F(0x44, 31, 31),
        cq_resize = F(0x44, 30, 30),
        cq_moderation = F(0x44, 29, 29),
        cq_eq_remap = F(0x44, 25, 25),
        pg = F(0x44, 24, 24),
        block_lb_mc = F(0x44, 23, 23),
        scqe_break_moderation = F(0x44, 21, 21),
        cq_period_start_from_cqe = F(0x44, 20, 20),
        cd = F(0x44, 19, 19),
        apm = F(0x44, 17, 17),
        vector_calc = F(0x44, 16, 16),
        imaicl = F(0x44, 14, 14),
        qkv = F(0x44, 9, 9),
        pkv = F(0x44, 8, 8),
        set_deth_sqpn = F(0x44, 7, 7),
        xrc = F(0x44, 3, 3),
        ud = F(0x44, 2, 2),
        uc = F(0x44, 1, 1),
        rc = F(0x44, 0, 0),
        uar_4k = F(0x48, 31, 31),
        uar_sz = F(0x48, 21, 16),
        log_pg_sz = F(0x48, 7, 0),
        bf = F(0x4c, 31, 31),
        driver_version = F(0x4c, 30, 30),
        pad_tx_eth_packet = F(0x4c, 29, 29),
        log_bf_reg_size = F(0x4c, 20, 16),
        lag_master = F(0x4c, 4, 4),
        num_lag_ports = F(0x4c, 3, 0),
        max_wqe_sz_sq = F(0x50, 15, 0),
        max_wqe_sz_rq = F(0x54, 15, 0),
        max_wqe_sz_sq_dc = F(0x58, 15, 0),
        max_qp_mcg = F(0x5c, 24, 0),
        log_max_mcg = F(0x60, 7, 0),
        log_max_transport_domain = F(0x64, 28, 24),
        log_max_pd = F(0x64, 20, 16),
        log_max_xrcd = F(0x64, 4, 0),
        log_max_flow_counter_bulk = F(0x68, 23, 16),
        log_max_rq = F(0x6c, 28, 24),
        log_max_sq = F(0x6c, 20, 16),
        log_max_tir = F(0x6c, 12, 8),
        log_max_tis = F(0x6c, 4, 0),
        basic_cyclic_rcv_wqe = F(0x70, 31, 31),
        log_max_rmp = F(0x70, 28, 24),
        log_max_rqt = F(0x70, 20, 16),
        log_max_rqt_size = F(0x70, 12, 8),
        log_max_tis_per_sq = F(0x70, 4, 0),
        log_max_stride_sz_rq = F(0x74, 28, 24),
        log_min_stride_sz_rq = F(0x74, 20, 16),
        log_max_stride_sz_sq = F(0x74, 12, 8),
        log_min_stride_sz_sq = F(0x74, 4, 0),
        log_max_wq_sz = F(0x78, 4, 0),
        log_max_vlan_list = F(0x7c, 20, 16),
        log_max_current_mc_list = F(0x7c, 12, 8),
        log_max_current_uc_list = F(0x7c, 4, 0),
        sq_ts_format = F(0x88, 31, 30),
        rq_ts_format = F(0x88, 29, 28),
        log_max_l2_table = F(0x90, 28, 24),
        log_uar_page_sz = F(0x90, 15, 0),
        device_frequency_mhz = F(0x98, 31, 0),
        device_frequency_khz = F(0x9c, 31, 0),
        log_max_pasid = F(0xa0, 4, 0),
        num_of_uars_per_page = F(0xa4, 31, 0),
    }
    roce_cap [0x100] {
        roce_apm = F(0x00, 31, 31),
        sw_r_roce_src_udp_port = F(0x00, 27, 27),
        fl_rc_qp_when_roce_disabled = F(0x00, 26, 26),
        fl_rc_qp_when_roce_enabled = F(0x00, 25, 25),
        qp_ts_format = F(0x00, 1, 0),
        l3_type = F(0x10, 19, 16),
        roce_version = F(0x10, 7, 0),
        r_roce_dest_udp_port = F(0x14, 15, 0),
        r_roce_max_src_udp_port = F(0x18, 31, 16),
        r_roce_min_src_udp_port = F(0x18, 15, 0),
        roce_address_table_size = F(0x1c, 15, 0),
    }
    enable_hca_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        function_id = F(0x08, 15, 0),
    }
    enable_hca_out [0xc] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    disable_hca_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        function_id = F(0x08, 15, 0),
    }
    disable_hca_out [0xc] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_issi_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
    }
    query_issi_out [0x70] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        current_issi = F(0x08, 15, 0),
        supported_issi_dw0 = F(0x6c, 31, 0),
    }
    set_issi_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        current_issi = F(0x08, 15, 0),
    }
    set_issi_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_pages_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        function_id = F(0x08, 15, 0),
    }
    query_pages_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        embedded_cpu_function = F(0x08, 31, 31),
        function_id = F(0x08, 15, 0),
        num_pages = F(0x0c, 31, 0),
    }
    manage_pages_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        embedded_cpu_function = F(0x08, 31, 31),
        function_id = F(0x08, 15, 0),
        input_num_entries = F(0x0c, 31, 0),
        pas = B(0x10, 0x8),
    }
    manage_pages_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        output_num_entries = F(0x08, 31, 0),
        pas = B(0x10, 0x8),
    }
    query_hca_cap_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_function = F(0x08, 31, 31),
        function_id = F(0x08, 15, 0),
    }
    query_hca_cap_out [0x1010] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        capability = B(0x10, 0x1000),
    }
    set_hca_cap_in [0x1010] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_function = F(0x08, 31, 31),
        function_id = F(0x08, 15, 0),
        capability = B(0x10, 0x1000),
    }
    set_hca_cap_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    init_hca_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
    }
    init_hca_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    teardown_hca_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        profile = F(0x08, 15, 0),
    }
    teardown_hca_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        state = F(0x0c, 0, 0),
    }
    access_register_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        register_id = F(0x08, 15, 0),
        argument = F(0x0c, 31, 0),
        register_data = F(0x10, 31, 0),
    }
    access_register_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        register_data = F(0x10, 31, 0),
    }
    pmtu_reg [0x10] {
        local_port = F(0x00, 23, 16),
        max_mtu = F(0x04, 31, 16),
        admin_mtu = F(0x08, 31, 16),
        oper_mtu = F(0x0c, 31, 16),
    }
    alloc_uar_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
    }
    alloc_uar_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        uar = F(0x08, 23, 0),
    }
    dealloc_uar_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        uar = F(0x08, 23, 0),
    }
    dealloc_uar_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    alloc_pd_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
    }
    alloc_pd_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        pd = F(0x08, 23, 0),
    }
    dealloc_pd_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        pd = F(0x08, 23, 0),
    }
    dealloc_pd_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    alloc_transport_domain_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
    }
    alloc_transport_domain_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        transport_domain = F(0x08, 23, 0),
    }
    dealloc_transport_domain_in [0x10] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        transport_domain = F(0x08, 23, 0),
    }
    dealloc_transport_domain_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_special_contexts_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
    }
    query_special_contexts_out [0x20] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        dump_fill_mkey = F(0x08, 31, 0),
        resd_lkey = F(0x0c, 31, 0),
        null_mkey = F(0x10, 31, 0),
    }
}
