"""The one check the error tests share."""
import pytest

import tilefuse


def raises_compile_error(fn, *substrings):
    """Runs fn, expects CompileError whose message contains every substring;
    returns the message."""
    with pytest.raises(tilefuse.CompileError) as info:
        fn()
    msg = str(info.value)
    for s in substrings:
        assert s in msg, f"CompileError message lacks {s!r}: {msg!r}"
    return msg
