"""Multi-plane Clos fabric simulator (issue 3): uSID switches, queues, ECN, trimming, failures."""
