"""fairseq_adapter refuses, at import, a fairseq version its contract tests did not pass on."""

import importlib.util

import fairseq
import pytest

from regattn_fairseq import fairseq_adapter


def test_the_installed_fairseq_is_the_tested_one():
    # fairseq-fixed==0.12.3.1 reports this version
    assert fairseq.__version__ in fairseq_adapter.TESTED_FAIRSEQ_VERSIONS
    fairseq_adapter.check_fairseq_version(fairseq.__version__)


@pytest.mark.parametrize("version", ["0.12.2", "0.12.3", "0.13.0", "1.0.0a0"])
def test_an_untested_version_is_refused_naming_both_versions_and_the_fix(version):
    with pytest.raises(ImportError) as error:
        fairseq_adapter.check_fairseq_version(version)
    message = str(error.value)
    assert f"fairseq {version} is installed" in message
    assert "0.12.3.1" in message and "pip install 'fairseq-fixed==0.12.3.1'" in message


def test_importing_the_adapter_under_an_untested_fairseq_fails(monkeypatch):
    monkeypatch.setattr(fairseq, "__version__", "0.10.2")
    # a fresh copy of the module, so the one the plugin uses stays as it is
    spec = importlib.util.spec_from_file_location("fairseq_adapter_copy", fairseq_adapter.__file__)
    with pytest.raises(ImportError, match="fairseq 0.10.2 is installed"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
