"""Tools some tests need (a browser, qemu-user): locally a test without one skips naming the fix;
under CI=true it fails, because .ci/run installs them and a skip there would hide a broken
install as a green run."""

import pytest

from kernel_paths import on_ci


def require(have: bool, what: str, fix: str) -> None:
    if have:
        return
    if on_ci():
        pytest.fail(
            f"CI=true: {what} is missing, so this test cannot run; .ci/run installs it ({fix})",
            pytrace=False,
        )
    pytest.skip(f"{what} is missing: {fix}")
