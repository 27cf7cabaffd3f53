"""The GMII-style byte interface between the MAC and a PHY interface (RGMII, or a test model).

Ref: IEEE Std 802.3-2022 §35.2.2 (GMII signals): ``TXD<7:0>``, ``TX_EN``, ``TX_ER`` are sampled by the
PHY at each rising edge of ``GTX_CLK``; ``RXD<7:0>``, ``RX_DV``, ``RX_ER`` are driven by the PHY
synchronously to ``RX_CLK``. At 1 Gb/s both clocks run at 125 MHz, one byte per cycle; ``TXD<0>`` /
``RXD<0>`` is the first bit on the wire (each byte goes out LSB first, §3.3).

Only the full-duplex 1000 Mb/s subset is used: no collision or carrier sense, no carrier extension
(``TX_ER`` with ``TX_EN`` low), and the receiver ignores ``RX_ER`` outside a frame (false carrier,
§35.2.2.9 table 35-2).
"""

from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["GmiiSignature"]


class GmiiSignature(wiring.Signature):
    """GMII as the MAC sees it: ``txd``/``tx_en``/``tx_er`` out (in the MAC's TX clock domain),
    ``rxd``/``rx_dv``/``rx_er`` in (in the RX clock domain, the clock the PHY recovers). A PHY interface
    takes the flipped signature."""

    def __init__(self):
        super().__init__(
            {
                "txd": Out(8),
                "tx_en": Out(1),
                "tx_er": Out(1),
                "rxd": In(8),
                "rx_dv": In(1),
                "rx_er": In(1),
            }
        )

    def __eq__(self, other):
        return isinstance(other, GmiiSignature)

    def __repr__(self):
        return "GmiiSignature()"
