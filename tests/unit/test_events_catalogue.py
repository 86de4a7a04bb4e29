"""Every log event is in the catalogue the documentation is generated from, with every field summarize reads."""

from eagle_probe import events
from eagle_probe.commands.summarize.fields import BY_EVENT, COMMON

NAMES = {value for key, value in vars(events).items() if key.isupper() and isinstance(value, str)
         and value.startswith("eagle_probe.")}


def test_every_event_name_is_catalogued():
    assert NAMES and set(events.CATALOGUE) == NAMES


def test_the_fields_summarize_reads_are_documented():
    missing = {name: sorted(set(fields) - set(events.CATALOGUE[name].field_names()))
               for name, fields in BY_EVENT.items()}
    assert {name: fields for name, fields in missing.items() if fields} == {}
    assert set(COMMON) <= set(events.COMMON_FIELDS)
