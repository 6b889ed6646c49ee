"""A replica that selects, reports what it holds, then hangs until killed or spends it all.

``python -m tests.workers.holding_replica TX_ID WALLET QUANTITY hold|spend REPORT``: select
QUANTITY of WALLET under TX_ID, write ``{"pid", "fence", "tokens"}`` to the file REPORT (whole
or not at all), then either sleep until killed (``hold``: a replica that crashes holding
tokens) or spend the selection to bob (``spend``) and exit.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    tx_id, wallet, quantity, mode, report = argv
    import django

    django.setup()
    from locks.services import select_tokens, spend_selection
    from tokens.services import TokenSpec

    selection, _ = select_tokens(tx_id, wallet, "USD", int(quantity))
    if mode == "spend":
        spend_selection(tx_id, [TokenSpec(tx_id, 0, "bob", "USD", int(selection.total))])
    held = {"pid": os.getpid(), "fence": selection.fence, "tokens": selection.token_ids}
    with open(report + ".tmp", "w") as out:
        json.dump(held, out)
    os.replace(report + ".tmp", report)  # appears whole or not at all
    if mode == "hold":
        time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
