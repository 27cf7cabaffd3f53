"""Amaranth gateware of the mrcnic MRC NIC: one ``wiring.Component`` per block."""
