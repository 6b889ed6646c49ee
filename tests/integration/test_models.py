"""Database constraints guard tokens and locks, not only Python validation."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from locks.models import Selection, TokenLock
from tests.factories import make_lock, make_token
from tokens.models import MAX_QUANTITY, Token

pytestmark = pytest.mark.django_db


def test_second_lock_row_for_same_token_is_rejected_by_postgres():
    token = make_token()
    make_lock(token, "tx-a")
    with pytest.raises(IntegrityError), transaction.atomic():
        TokenLock.objects.create_for(
            token, spender_tx_id="tx-b", fence=2, expires_at=TokenLock.objects.get().expires_at
        )
    assert TokenLock.objects.get().spender_tx_id == "tx-a"


def test_lock_insert_conflict_is_reported_by_on_conflict_do_nothing():
    token = make_token()
    make_lock(token, "tx-a")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, expires_at, wallet, "
            "currency, quantity) VALUES (%s, 'tx-b', 2, now() + interval '1 minute', %s, 'U', 1) "
            "ON CONFLICT (wallet, token_id) DO NOTHING RETURNING token_id",
            [token.pk, token.wallet],
        )
        assert cursor.fetchall() == []


@pytest.mark.parametrize("quantity", [Decimal(-1), MAX_QUANTITY + 1])
def test_quantity_out_of_range_is_rejected_by_postgres(quantity):
    with pytest.raises(IntegrityError), transaction.atomic():
        Token.objects.create(tx_id="t", index=0, wallet="w", currency="USD", quantity=quantity)
    assert not Token.objects.exists()


def test_largest_quantity_is_stored_exactly():
    token = make_token(quantity=MAX_QUANTITY)
    token.refresh_from_db()
    assert token.quantity == Decimal(18446744073709551615)
    assert isinstance(token.quantity, Decimal)


def test_quantity_validators_reject_out_of_range_values():
    token = Token(tx_id="t", index=0, wallet="w", currency="USD", quantity=MAX_QUANTITY + 1)
    with pytest.raises(ValidationError) as excinfo:
        token.full_clean()
    assert "quantity" in excinfo.value.message_dict


def test_token_identity_is_unique():
    make_token(tx_id="tx", index=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        make_token(tx_id="tx", index=0, wallet="bob")


def test_spent_by_and_spent_at_go_together():
    token = make_token()
    with pytest.raises(IntegrityError), transaction.atomic():
        Token.objects.filter(pk=token.pk).update(spent_by="tx-spend")


def test_lock_expiry_cannot_precede_creation():
    token = make_token()
    make_lock(token)
    with pytest.raises(IntegrityError), transaction.atomic():
        TokenLock.objects.filter(pk=token.pk).update(expires_at="2000-01-01T00:00:00Z")


def test_deleting_a_token_removes_its_lock():
    token = make_token()
    make_lock(token)
    token.delete()
    assert not TokenLock.objects.exists()


def test_selection_fences_come_from_a_strictly_increasing_sequence():
    fences = [
        Selection.objects.create(
            tx_id=f"tx-{i}", wallet="w", currency="USD", quantity=1, total=1
        ).fence
        for i in range(3)
    ]
    assert fences == sorted(fences) and len(set(fences)) == 3


def test_partial_index_covers_the_candidate_query():
    """Unspent tokens of (wallet, currency) in id order, quantity included, spent ones left out."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'token_unspent_by_wallet'"
        )
        (definition,) = cursor.fetchone()
    assert "(wallet, currency, id) INCLUDE (quantity)" in definition
    assert definition.endswith("WHERE (spent_at IS NULL)")


def test_the_token_table_has_only_the_indexes_its_readers_need():
    """Each costs every spend; tokens.models.Token's Meta says what reads each one."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'tokens_token'")
        names = {name for (name,) in cursor.fetchall()}
    assert names == {
        "tokens_token_pkey",
        "token_unspent_by_wallet",
        "token_unspent_by_amount",
        "token_by_wallet",
        "token_identity_unique",
    }


def test_the_token_and_lock_tables_have_only_their_listed_checks():
    """Each is parsed again at every execution of a statement that writes its table."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conrelid::regclass::text, conname FROM pg_constraint"
            " WHERE contype = 'c' AND conrelid IN ('tokens_token'::regclass,"
            " 'locks_tokenlock'::regclass)"
        )
        checks = set(cursor.fetchall())
    assert checks == {
        ("tokens_token", "tokens_token_index_check"),
        ("tokens_token", "token_quantity_range"),
        ("tokens_token", "token_spent_fields_together"),
        ("tokens_token", "token_names_not_empty"),
        ("locks_tokenlock", "tokenlock_expiry_after_creation"),
    }


def test_a_selection_built_from_a_statement_row_is_the_row_the_orm_reads():
    from locks.services import select_tokens

    make_token(wallet="w", quantity=9)
    answered, _ = select_tokens("t-row", "w", "USD", 4)
    read = Selection.objects.get(tx_id="t-row")
    for field in Selection._meta.concrete_fields:
        if field.attname != "output_ids":  # the answer leaves it at its default, as written
            assert getattr(answered, field.attname) == getattr(read, field.attname), field.name
    assert answered.output_ids == read.output_ids == []
    assert not answered._state.adding  # it is in the database
    given = {f.attname: getattr(read, f.attname) for f in Selection._meta.concrete_fields}
    del given["token_ids"], given["output_ids"]
    one, other = Selection.answered(**given), Selection.answered(**given)
    assert one.token_ids == other.token_ids == [] and one.token_ids is not other.token_ids
