//! NIC receive steering [mlx5_ifc.h]: flow tables, groups, match parameters and entries.

#[allow(unused_imports)]
use super::*;

layouts! {
    flow_table_context [0x28] {
        reformat_en = F(0x00, 31, 31),
        decap_en = F(0x00, 30, 30),
        sw_owner = F(0x00, 29, 29),
        termination_table = F(0x00, 28, 28),
        table_miss_action = F(0x00, 27, 24),
        level = F(0x00, 23, 16),
        log_size = F(0x00, 7, 0),
        table_miss_id = F(0x04, 23, 0),
        lag_master_next_table_id = F(0x08, 23, 0),
        sw_owner_icm_root_1 = B(0x18, 0x8),
        sw_owner_icm_root_0 = B(0x20, 0x8),
    }
    create_flow_table_in [0x40] {
        opcode = F(0x00, 31, 16),
        uid = F(0x00, 15, 0),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        flow_table_context = S(0x18, &flow_table_context::LAYOUT),
    }
    create_flow_table_out [0x10] {
        status = F(0x00, 31, 24),
        icm_address_63_40 = F(0x00, 23, 0),
        syndrome = F(0x04, 31, 0),
        icm_address_39_32 = F(0x08, 31, 24),
        table_id = F(0x08, 23, 0),
        icm_address_31_0 = F(0x0c, 31, 0),
    }
    destroy_flow_table_in [0x40] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
    }
    fte_match_set_lyr_2_4 [0x40] {
        smac_47_16 = F(0x00, 31, 0),
        smac_15_0 = F(0x04, 31, 16),
        ethertype = F(0x04, 15, 0),
        dmac_47_16 = F(0x08, 31, 0),
        dmac_15_0 = F(0x0c, 31, 16),
        first_prio = F(0x0c, 15, 13),
        first_cfi = F(0x0c, 12, 12),
        first_vid = F(0x0c, 11, 0),
        ip_protocol = F(0x10, 31, 24),
        ip_dscp = F(0x10, 23, 18),
        ip_ecn = F(0x10, 17, 16),
        cvlan_tag = F(0x10, 15, 15),
        svlan_tag = F(0x10, 14, 14),
        frag = F(0x10, 13, 13),
        ip_version = F(0x10, 12, 9),
        tcp_flags = F(0x10, 8, 0),
        tcp_sport = F(0x14, 31, 16),
        tcp_dport = F(0x14, 15, 0),
        ttl_hoplimit = F(0x18, 7, 0),
        udp_sport = F(0x1c, 31, 16),
        udp_dport = F(0x1c, 15, 0),
        src_ipv4_src_ipv6 = B(0x20, 0x10),
        dst_ipv4_dst_ipv6 = B(0x30, 0x10),
    }
    fte_match_set_misc [0x40] {
        source_sqn = F(0x00, 23, 0),
        source_port = F(0x04, 15, 0),
        outer_second_prio = F(0x08, 31, 29),
        outer_second_cfi = F(0x08, 28, 28),
        outer_second_vid = F(0x08, 27, 16),
        inner_second_prio = F(0x08, 15, 13),
        inner_second_cfi = F(0x08, 12, 12),
        inner_second_vid = F(0x08, 11, 0),
        outer_second_cvlan_tag = F(0x0c, 31, 31),
        inner_second_cvlan_tag = F(0x0c, 30, 30),
        outer_second_svlan_tag = F(0x0c, 29, 29),
        inner_second_svlan_tag = F(0x0c, 28, 28),
        outer_emd_tag = F(0x0c, 27, 27),
        gre_protocol = F(0x0c, 15, 0),
        gre_key_h = F(0x10, 31, 8),
        gre_key_l = F(0x10, 7, 0),
        vxlan_vni = F(0x14, 31, 8),
        outer_ipv6_flow_label = F(0x1c, 19, 0),
        inner_ipv6_flow_label = F(0x20, 19, 0),
        bth_dst_qp = F(0x28, 23, 0),
        inner_esp_spi = F(0x2c, 31, 0),
        outer_esp_spi = F(0x30, 31, 0),
        outer_emd_tag_data = B(0x38, 0x6),
    }
    fte_match_param [0x200] {
        outer_headers = S(0x0, &fte_match_set_lyr_2_4::LAYOUT),
        misc_parameters = S(0x40, &fte_match_set_misc::LAYOUT),
        inner_headers = S(0x80, &fte_match_set_lyr_2_4::LAYOUT),
    }
    create_flow_group_in [0x400] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
        start_flow_index = F(0x1c, 31, 0),
        end_flow_index = F(0x24, 31, 0),
        match_criteria_enable = F(0x3c, 7, 0),
        match_criteria = S(0x40, &fte_match_param::LAYOUT),
    }
    create_flow_group_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        group_id = F(0x08, 23, 0),
    }
    destroy_flow_group_in [0x40] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
        group_id = F(0x18, 31, 0),
    }
    dest_format_struct [0x8] {
        destination_type = F(0x00, 31, 24),
        destination_id = F(0x00, 23, 0),
    }
    flow_context [0x300] {
        tpid = F(0x00, 31, 16),
        vlan_pcp = F(0x00, 15, 13),
        vlan_dei = F(0x00, 12, 12),
        vlan_id = F(0x00, 11, 0),
        group_id = F(0x04, 31, 0),
        flow_tag = F(0x08, 23, 0),
        action = F(0x0c, 15, 0),
        extended_destination = F(0x10, 31, 31),
        destination_list_size = F(0x10, 23, 0),
        flow_counter_list_size = F(0x14, 23, 0),
        encap_id = F(0x18, 31, 0),
        modify_header_id = F(0x1c, 31, 0),
        match_value = S(0x40, &fte_match_param::LAYOUT),
        destination = B(0x300, 0x8),
    }
    set_fte_in [0x340] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
        modify_enable_mask = F(0x18, 7, 0),
        flow_index = F(0x20, 31, 0),
        flow_context = S(0x40, &flow_context::LAYOUT),
    }
    delete_fte_in [0x40] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
        flow_index = F(0x20, 31, 0),
    }
    set_flow_table_root_in [0x40] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        table_type = F(0x10, 31, 24),
        table_id = F(0x14, 23, 0),
        underlay_qpn = F(0x18, 23, 0),
    }
}
