#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""An rdma_cm listener whose user destroys it while holding a request.

  cm_hold.py ADDR PORT SECONDS

Listens on ADDR:PORT (rdma_cm, through pyverbs), takes one connection
request, destroys the listener without answering the request, holds the
request SECONDS, then closes it (which rejects it, if it still can be).
Prints "listening", "request held, listener destroyed" and "closed" as it
goes; exits 0, or 1 with the error. It uses an event channel: with
librdmacm's synchronous calls (rdma_get_request) destroying the listener
waits until the request it produced is answered.
"""

import sys
import time

import pyverbs.cm_enums as ce
from pyverbs.cmid import AddrInfo, CMEvent, CMEventChannel, CMID


def main():
    addr, port, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
    try:
        channel = CMEventChannel()
        listener = CMID(creator=channel, port_space=ce.RDMA_PS_TCP)
        listener.bind_addr(AddrInfo(src=addr, src_service=port, port_space=ce.RDMA_PS_TCP,
                                    flags=ce.RAI_PASSIVE))
        listener.listen()
        print("listening", flush=True)
        event = CMEvent(channel)
        if event.event_type != ce.RDMA_CM_EVENT_CONNECT_REQUEST:
            raise RuntimeError(f"expected a connection request, got event {event.event_type}")
        request = CMID(creator=event, listen_id=listener)
        event.ack_cm_event()
        listener.close()
        print("request held, listener destroyed", flush=True)
        time.sleep(secs)
        request.close()
        channel.close()
        print("closed", flush=True)
    except Exception as e:  # pylint: disable=broad-except
        print(f"cm_hold.py: {type(e).__name__}: {e}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
