"""Value types exchanged between the selector, its cache and token stores."""

from __future__ import annotations

from dataclasses import dataclass, field

# Token quantities are stored as unsigned 64-bit integers by the ledger.
MAX_QUANTITY = 2**64 - 1


@dataclass(frozen=True, slots=True)
class WalletKey:
    """Identify the tokens of one currency owned by one wallet."""

    wallet: str
    currency: str

    def __str__(self) -> str:
        return f"{self.wallet}/{self.currency}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """Describe a token that may be selected: its id and integer quantity."""

    token_id: int
    quantity: int

    def __post_init__(self) -> None:
        # A store backed by a NUMERIC column hands back Decimal; summing those with
        # ints works silently, so reject anything but int at the boundary.
        if type(self.token_id) is not int:
            raise TypeError(f"token_id must be int, not {type(self.token_id).__name__}")
        if type(self.quantity) is not int:
            raise TypeError(f"quantity must be int, not {type(self.quantity).__name__}")
        if self.quantity < 0:
            raise ValueError(f"quantity must not be negative: {self.quantity}")


@dataclass(frozen=True, slots=True)
class Claim:
    """A selection in progress, as one locking call sees it.

    The store locks for `tx_id` under `fence`; with `fence` None the call draws the
    selection's fence itself (in the same round trip) and reports it. `held` are the tokens
    earlier calls of this selection locked. With `record` the store also records the
    selection, in the call that completes `quantity` (so it knows the whole selection from
    `held`), and refuses a transaction id that already has one in `namespace`
    (ClaimRefused): transaction ids are unique per namespace, i.e. per client.
    """

    tx_id: str
    key: WalletKey
    quantity: int
    fence: int | None = None
    held: tuple[Candidate, ...] = ()
    # Earliest lease expiry among `held`, as the store reported it.
    held_expiry: object | None = None
    record: bool = False
    namespace: str = ""
    # How a fetch orders the rows it reads and locks a prefix of (sherdlock.strategies.ORDERS),
    # and the strategy a recording store writes on the selection.
    order: str = "random"
    strategy: str = "random"
    # The key's selections keep colliding (sherdlock.cache, "contested"): its caller keeps no
    # queue of it (`spare` false), and a newcomer's fetch may yield to the key's turn
    # (`yield_to_turn`).
    contested: bool = False
    # Whether the caller keeps the rows a fetch reads but does not lock (FetchResult.spare):
    # a replica keeps no queue of a contested key (sherdlock.cache), nor of one it does not
    # select from often (a cold one, sherdlock.demand), so a store may leave them out of its
    # answer. Nor need such a fetch spread its read over the wallet: each replica locks a few
    # tokens of its own shuffle of what it read, so replicas that read the same tokens seldom
    # pick the same ones. Only replicas that queue what they read need to read different parts
    # of the wallet, or their queues would hold the same tokens.
    spare: bool = True
    # A newcomer to a contested key (sherdlock.turns): a fetch locks nothing while another
    # selection holds or asks for the key's turn, and says so (FetchResult.turn_taken).
    yield_to_turn: bool = False

    @property
    def held_total(self) -> int:
        """Return the quantity already locked by this selection."""
        return sum(c.quantity for c in self.held)

    @property
    def need(self) -> int:
        """Return the quantity still to lock."""
        return max(0, self.quantity - self.held_total)


@dataclass(frozen=True, slots=True)
class Supply:
    """Hold authoritative totals of one wallet/currency as seen by one transaction."""

    unspent: int
    # Held by live locks of spenders other than the asking transaction.
    locked_by_others: int
    # False when the wallet has more unspent tokens than a selection may examine
    # (strategies.MAX_EXAMINED): the totals are then those of its largest MAX_EXAMINED + 1.
    complete: bool = True

    @property
    def available(self) -> int:
        """Return the unspent quantity not held by other spenders."""
        return max(0, self.unspent - self.locked_by_others)


@dataclass(frozen=True, slots=True)
class LockOutcome:
    """Report which submitted candidates a store locked, and until when."""

    granted: list[Candidate] = field(default_factory=list)
    # Lease expiry as the store reports it (datetime, float, ...); None if nothing granted.
    expires_at: object | None = None
    # The selection's fence: the claim's, or the one the call drew.
    fence: int | None = None
    # What the store recorded when this call completed a recording claim; else None.
    record: object | None = None


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Report what one fetch-and-lock call locked and which other free tokens it saw."""

    granted: list[Candidate] = field(default_factory=list)
    # Unlocked candidates seen but not locked; they feed the cache.
    spare: list[Candidate] = field(default_factory=list)
    # True when the store returned every free token it could see (fewer rows than the limit).
    exhausted: bool = False
    expires_at: object | None = None
    # Rows the store tried to lock but lost to a concurrent selection after its snapshot.
    conflicts: int = 0
    fence: int | None = None
    # Set when the free tokens cannot make up the claim's need, in which case nothing was
    # locked: the wallet's totals, to tell insufficient funds from funds held by others.
    shortfall: Supply | None = None
    record: object | None = None
    # Set by a random fetch whose batch was full (the wallet has more free tokens than the
    # limit) but cannot cover the need; nothing was locked. The wallet may still cover it with
    # its larger tokens: fetch next in descending order (ORDER_DESCENDING).
    short_batch: bool = False
    # Set when the wallet's largest strategies.MAX_EXAMINED free tokens cannot cover the need
    # and it has more free tokens than that: covering it would take more tokens than one
    # selection may examine. Nothing was locked, and the rest of the wallet was not read.
    too_many: bool = False
    # The rows of the batch the fetch read (free tokens of the key, in the claim's order) and
    # what they add up to: what a batch of the key holds per token.
    batch_rows: int = 0
    batch_total: int = 0
    # Set when the claim yields to the key's turn (Claim.yield_to_turn) and another selection
    # holds or asks for it: nothing was locked.
    turn_taken: bool = False


@dataclass(slots=True)
class SelectionStats:
    """Count the work one selection did; attached to results and errors."""

    # Token ids submitted for locking: try_lock batches plus the prefixes fetch_and_lock chose.
    lock_attempts: int = 0
    # Submitted but not granted: someone else held, spent or touched them.
    lock_conflicts: int = 0
    fetches: int = 0
    # Tokens taken from the cache that were then locked.
    cache_hits: int = 0
    # Selection rounds run, including the first; more than one means backoff happened.
    rounds: int = 0
    backoff_seconds: float = 0.0
    # Turns of its key this selection took (sherdlock.turns).
    turns: int = 0


@dataclass(frozen=True, slots=True)
class Selection:
    """Describe tokens locked for one transaction under one fence."""

    tx_id: str
    key: WalletKey
    quantity: int
    fence: int
    tokens: tuple[Candidate, ...]
    total: int
    expires_at: object | None
    stats: SelectionStats
    # What the store recorded for this selection (see Claim.record); else None.
    record: object | None = None
    # The strategy that made it (an exact selection that fell back reports "random").
    strategy: str = "random"

    @property
    def inputs(self) -> int:
        """Return the number of tokens selected."""
        return len(self.tokens)

    @property
    def token_ids(self) -> tuple[int, ...]:
        """Return the ids of the selected tokens, in selection order."""
        return tuple(c.token_id for c in self.tokens)

    @property
    def change(self) -> int:
        """Return how much the selected tokens exceed the requested quantity."""
        return self.total - self.quantity
