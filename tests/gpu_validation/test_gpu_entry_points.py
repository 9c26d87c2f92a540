"""The ``python -m gpu_validation...`` commands refuse ``--device cuda`` where torch sees no CUDA device with the
parser's one line (exit 2), not a traceback from deep in torch."""

import pytest
import torch

from gpu_validation import host_transfer, run_all, whole_step


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
@pytest.mark.parametrize("command", [run_all, host_transfer, whole_step])
def test_cuda_without_a_device_is_one_line(command, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        command.main([str(tmp_path / "out.csv"), "--device", "cuda"])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip().endswith("error: --device cuda: torch sees no CUDA device")
