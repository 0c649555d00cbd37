//! Port objects of bring-up: protection and transport domains, reserved keys, MAC, RoCE enable, the GID table.

use super::*;
use rdma::cm_wire::gid_from_ipv4;

impl<H: Hal, M: Mmio> Mlx5<H, M> {
    pub(super) fn alloc_pd(&mut self) -> Result<(), Error> {
        self.simple(op::ALLOC_PD, 0, alloc_pd_in::LAYOUT.size, &[])?;
        self.pd = Some(Pdn(self.out(alloc_pd_out::pd) as u32));
        Ok(())
    }

    pub(super) fn alloc_td(&mut self) -> Result<(), Error> {
        self.simple(op::ALLOC_TRANSPORT_DOMAIN, 0, alloc_transport_domain_in::LAYOUT.size, &[])?;
        self.td = Some(self.out(alloc_transport_domain_out::transport_domain) as u32);
        Ok(())
    }

    pub(super) fn query_special_contexts(&mut self) -> Result<(), Error> {
        self.begin(op::QUERY_SPECIAL_CONTEXTS, 0, query_special_contexts_in::LAYOUT.size);
        self.run(query_special_contexts_in::LAYOUT.size, query_special_contexts_out::LAYOUT.size)?;
        self.resd_lkey = Lkey(self.out(query_special_contexts_out::resd_lkey) as u32);
        Ok(())
    }

    pub(super) fn query_mac(&mut self) -> Result<(), Error> {
        self.begin(op::QUERY_NIC_VPORT_CONTEXT, 0, query_nic_vport_context_in::LAYOUT.size);
        self.run(query_nic_vport_context_in::LAYOUT.size, query_nic_vport_context_out::LAYOUT.size)?;
        let a = query_nic_vport_context_out::nic_vport_context;
        let p = nic_vport_context::permanent_address.at(a);
        let hi = self.out(mac_address_layout::mac_addr_47_32.at(p)) as u16;
        let lo = self.out(mac_address_layout::mac_addr_31_0.at(p)) as u32;
        self.mac[..2].copy_from_slice(&hi.to_be_bytes());
        self.mac[2..].copy_from_slice(&lo.to_be_bytes());
        Ok(())
    }

    pub(super) fn enable_roce(&mut self) -> Result<(), Error> {
        let len = modify_nic_vport_context_in::LAYOUT.size;
        self.begin(op::MODIFY_NIC_VPORT_CONTEXT, 0, len);
        let fs = modify_nic_vport_context_in::field_select;
        set(&mut self.inb, modify_nic_vport_field_select::roce_en.at(fs), 1);
        let ctx = modify_nic_vport_context_in::nic_vport_context;
        set(&mut self.inb, nic_vport_context::roce_en.at(ctx), 1);
        self.run(len, modify_nic_vport_context_out::LAYOUT.size)?;
        self.roce_enabled = true;
        Ok(())
    }

    pub(super) fn set_roce_gid(&mut self, index: u16, gid: Option<[u8; 16]>) -> Result<(), Error> {
        let len = set_roce_address_in::LAYOUT.size;
        self.begin(op::SET_ROCE_ADDRESS, 0, len);
        set(&mut self.inb, set_roce_address_in::roce_address_index, index as u64);
        if let Some(gid) = gid {
            let a = set_roce_address_in::roce_address;
            set_bytes(&mut self.inb, roce_addr_layout::source_l3_address.at(a), &gid);
            let mac = self.mac;
            set(&mut self.inb, roce_addr_layout::source_mac_47_32.at(a), u16::from_be_bytes([mac[0], mac[1]]) as u64);
            set(
                &mut self.inb,
                roce_addr_layout::source_mac_31_0.at(a),
                u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) as u64,
            );
            set(&mut self.inb, roce_addr_layout::roce_l3_type.at(a), 0); // IPv4
            set(&mut self.inb, roce_addr_layout::roce_version.at(a), 2); // RoCEv2
        }
        self.run(len, set_roce_address_out::LAYOUT.size)
    }

    /// Program GID `index` with `ip` as an IPv4-mapped IPv6 address, RoCEv2.
    pub fn set_roce_address(&mut self, index: u16, ip: [u8; 4]) -> Result<(), Error> {
        self.set_roce_gid(index, Some(gid_from_ipv4(ip)))
    }
}
