"""mrcnic: an open FPGA NIC for MRC (Multipath Reliable Connection).

Sub-packages:

* :mod:`mrcnic.wire` - the wire format: one codec for every MRC header, scapy layers, pcap helpers.
* :mod:`mrcnic.hdl` - Amaranth gateware of the NIC.
* :mod:`mrcnic.boards` - board platforms and top levels for ECP5 boards.
"""

__version__ = "0.1.0"
