//! The NIC vport [mlx5_ifc.h]: vport state, NIC vport context (MAC, MTU, RoCE enable) and the
//! RoCE address (GID) table.

#[allow(unused_imports)]
use super::*;

layouts! {
    modify_nic_vport_field_select [0x4] {
        affiliation = F(0x00, 13, 13),
        disable_uc_local_lb = F(0x00, 11, 11),
        disable_mc_local_lb = F(0x00, 10, 10),
        node_guid = F(0x00, 9, 9),
        port_guid = F(0x00, 8, 8),
        min_inline = F(0x00, 7, 7),
        mtu = F(0x00, 6, 6),
        change_event = F(0x00, 5, 5),
        promisc = F(0x00, 4, 4),
        permanent_address = F(0x00, 3, 3),
        addresses_list = F(0x00, 2, 2),
        roce_en = F(0x00, 1, 1),
    }
    mac_address_layout [0x8] {
        mac_addr_47_32 = F(0x00, 15, 0),
        mac_addr_31_0 = F(0x04, 31, 0),
    }
    roce_addr_layout [0x20] {
        source_l3_address = B(0x0, 0x10),
        vlan_valid = F(0x10, 28, 28),
        vlan_id = F(0x10, 27, 16),
        source_mac_47_32 = F(0x10, 15, 0),
        source_mac_31_0 = F(0x14, 31, 0),
        roce_l3_type = F(0x18, 11, 8),
        roce_version = F(0x18, 7, 0),
    }
    nic_vport_context [0x100] {
        min_wqe_inline_mode = F(0x00, 26, 24),
        disable_mc_local_lb = F(0x00, 2, 2),
        disable_uc_local_lb = F(0x00, 1, 1),
        roce_en = F(0x00, 0, 0),
        arm_change_event = F(0x04, 31, 31),
        event_on_mtu = F(0x04, 4, 4),
        event_on_promisc_change = F(0x04, 3, 3),
        event_on_vlan_change = F(0x04, 2, 2),
        event_on_mc_address_change = F(0x04, 1, 1),
        event_on_uc_address_change = F(0x04, 0, 0),
        mtu = F(0x24, 15, 0),
        system_image_guid = B(0x28, 0x8),
        port_guid = B(0x30, 0x8),
        node_guid = B(0x38, 0x8),
        qkey_violation_counter = F(0x68, 31, 16),
        promisc_uc = F(0xf0, 31, 31),
        promisc_mc = F(0xf0, 30, 30),
        promisc_all = F(0xf0, 29, 29),
        allowed_list_type = F(0xf0, 26, 24),
        allowed_list_size = F(0xf0, 11, 0),
        permanent_address = S(0xf4, &mac_address_layout::LAYOUT),
    }
    // Linux include/linux/mlx5/mlx5_ifc.h query_vport_state_in/out; op_mod 0 = vNIC vport
    // (MLX5_VPORT_STATE_OP_MOD_VNIC_VPORT), state 0 = down, 1 = up (vport.h MLX5_VPORT_STATE_*).
    query_vport_state_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
    }
    query_vport_state_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        admin_state = F(0x0c, 7, 4),
        state = F(0x0c, 3, 0),
    }
    query_nic_vport_context_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        allowed_list_type = F(0x0c, 26, 24),
    }
    query_nic_vport_context_out [0x110] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        nic_vport_context = S(0x10, &nic_vport_context::LAYOUT),
    }
    modify_nic_vport_context_in [0x200] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        other_vport = F(0x08, 31, 31),
        vport_number = F(0x08, 15, 0),
        field_select = S(0xc, &modify_nic_vport_field_select::LAYOUT),
        nic_vport_context = S(0x100, &nic_vport_context::LAYOUT),
    }
    modify_nic_vport_context_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    set_roce_address_in [0x30] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        roce_address_index = F(0x08, 31, 16),
        vhca_port_num = F(0x08, 3, 0),
        roce_address = S(0x10, &roce_addr_layout::LAYOUT),
    }
    set_roce_address_out [0x10] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
    }
    query_roce_address_in [0x10] {
        opcode = F(0x00, 31, 16),
        op_mod = F(0x04, 15, 0),
        roce_address_index = F(0x08, 31, 16),
        vhca_port_num = F(0x08, 3, 0),
    }
    query_roce_address_out [0x30] {
        status = F(0x00, 31, 24),
        syndrome = F(0x04, 31, 0),
        roce_address = S(0x10, &roce_addr_layout::LAYOUT),
    }
}
