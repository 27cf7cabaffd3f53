"""1 Gb/s Ethernet: MAC (IEEE 802.3 clauses 3, 4, 35), the port that puts it in the core's clock domain,
and the RGMII v2.0 PHY interface. See docs/ethernet.md."""
