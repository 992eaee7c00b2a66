"""End to end through the `ctxnmt` command line: data → prepare → train → translate
→ score on a slice of the Bible, exact resume, and clear errors for bad input."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import torch

from ctxnmt.cli import build_parser, main
from tests.conftest import needs_diatheke

TINY_CONFIG = """
name: tiny
model_dir: {model_dir}
data: {{corpus: files, dir: {data}, bpe_merges: 500, max_len: 100}}
model: {{emb_dim: 32, hidden_dim: 48, att_dim: 32, dropout_out: 0.2}}
training: {{batch_tokens: 700, batch_sents: 40, max_updates: 40, valid_every: 20, valid_max_sents: 20,
           valid_beam: 2, log_every: 10, seed: 7, lr: 0.003}}
decoding: {{beam: 3, batch_size: 16}}
"""


def write_config(path: Path, data: Path, model_dir: Path) -> Path:
    path.write_text(TINY_CONFIG.format(data=data, model_dir=model_dir))
    return path


def run(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def bible_slice(bible_corpus, tmp_path_factory):
    """The first chapters of the real corpus: 1,000 training, 30 dev and 30 test verses."""
    src_dir, _ = bible_corpus
    out = tmp_path_factory.mktemp("slice")
    for split, n in (("train", 1000), ("dev", 30), ("test", 30)):
        for ext in ("es", "en", "doc"):
            lines = (src_dir / f"{split}.{ext}").read_text(encoding="utf-8").splitlines()[:n]
            (out / f"{split}.{ext}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@needs_diatheke
def test_data_prepare_train_translate_score(bible_slice, tmp_path, capsys):
    cfg = write_config(tmp_path / "tiny.yaml", bible_slice, tmp_path / "model")
    code, out, _ = run(["prepare", cfg], capsys)
    assert code == 0 and re.search(r"prepared 9\d\d training and 30 dev pairs", out)
    code, out, _ = run(["train", cfg, "--quiet", "--set", "training.max_updates=200",
                        "--set", "training.valid_every=100"], capsys)
    assert code == 0 and "200 updates" in out
    model_dir = tmp_path / "model"
    for name in ("config.yaml", "train.log", "checkpoints/best.pt", "checkpoints/last.pt", "prep/vocab.tgt",
                 "done.json"):
        assert (model_dir / name).is_file(), name
    log = (model_dir / "train.log").read_text()
    ppl = [float(p) for p in re.findall(r"validation at update \d+ \(\d+ target tokens\): ppl ([\d.]+), bleu", log)]
    assert len(ppl) == 2 and ppl[1] < ppl[0] < 1000  # it learns: dev perplexity falls
    # Input with an empty line in the middle: output keeps the line structure.
    test_src = bible_slice / "test.es"
    lines = test_src.read_text(encoding="utf-8").splitlines()
    mixed = tmp_path / "mixed.es"
    mixed.write_text("\n".join(lines[:3] + [""] + lines[3:10]) + "\n", encoding="utf-8")
    hyp = tmp_path / "hyp.en"
    att = tmp_path / "att.jsonl"
    code, _, _ = run(["translate", model_dir, "-i", mixed, "-o", hyp, "--beam", "2", "--attention", att], capsys)
    assert code == 0
    out_lines = hyp.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(out_lines) == 11 and out_lines[3] == ""
    assert len(att.read_text().splitlines()) == 11
    code, out, _ = run(["translate", model_dir, "-i", test_src, "-o", hyp], capsys)
    assert code == 0 and len(hyp.read_text(encoding="utf-8").splitlines()) == 30
    code, out, _ = run(["score", "--hyp", hyp, "--ref", bible_slice / "test.en", "--lang", "en", "--metrics",
                        "bleu,chrf"], capsys)
    assert code == 0 and "BLEU|" in out and "chrF" in out and "tokenised BLEU" in out


@needs_diatheke
def test_interrupted_and_resumed_training_equals_uninterrupted(bible_slice, tmp_path, capsys):
    cfg = write_config(tmp_path / "tiny.yaml", bible_slice, tmp_path / "unused")
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert run(["train", cfg, "--quiet", "--set", f"model_dir={straight}"], capsys)[0] == 0
    assert run(["train", cfg, "--quiet", "--set", f"model_dir={interrupted}",
                "--set", "training.max_updates=13"], capsys)[0] == 0
    code, out, _ = run(["train", cfg, "--quiet", "--resume", "--set", f"model_dir={interrupted}"], capsys)
    assert code == 0 and "40 updates" in out
    a = torch.load(straight / "checkpoints/last.pt", weights_only=True)
    b = torch.load(interrupted / "checkpoints/last.pt", weights_only=True)
    assert a["progress"]["update"] == b["progress"]["update"] == 40
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert a["schedule"] == b["schedule"]


# -- bad input: one clear line, exit status 2, nothing half-written ---------------------

def small_corpus(tmp_path: Path, src_lines: int = 12, tgt_lines: int = 12) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    words = "the cat sat on a mat and dog ran".split()
    for split in ("train", "dev"):
        (data / f"{split}.es").write_text("".join(f"el gato {i} .\n" for i in range(src_lines)), encoding="utf-8")
        (data / f"{split}.en").write_text("".join(f"{words[i % 9]} cat {i} .\n" for i in range(tgt_lines)),
                                          encoding="utf-8")
    return data


def document_corpus(tmp_path: Path) -> Path:
    """small_corpus with document ids: three chapters of four sentences in each split."""
    data = small_corpus(tmp_path)
    for split in ("train", "dev"):
        (data / f"{split}.doc").write_text("".join(f"ch{i // 4}\n" for i in range(12)))
    return data


def test_mismatched_parallel_files(tmp_path, capsys):
    data = small_corpus(tmp_path, 12, 11)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    code, _, err = run(["prepare", cfg], capsys)
    assert code == 2
    assert re.search(r"train\.es has 12 lines but .*train\.en has 11", err)
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()  # it left an empty model directory


def test_a_document_model_without_document_ids_is_refused_before_anything_is_made(tmp_path, capsys, monkeypatch):
    """The refusal came from training, after the data was prepared; now it comes first, from
    prepare and train alike, and names model.context and the missing file."""
    from ctxnmt.tasks import commands

    def no_work(*args, **kwargs):
        raise AssertionError("prepared")

    monkeypatch.setattr(commands, "prepare", no_work)
    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    for doc_model in ("model.context=concat", "model.doc_init_dec=true"):
        for command in ("prepare", "train"):
            code, _, err = run([command, cfg, "--set", doc_model], capsys)
            assert code == 2 and err == (f"ctxnmt {command}: error: {data / 'train.doc'}: no such file; a document-"
                                         "context model (model.context) needs document ids for the train split\n")
            assert not (tmp_path / "m").exists()
    (data / "train.doc").write_text("".join(f"d{i // 4}\n" for i in range(12)))
    code, _, err = run(["prepare", cfg, "--set", "model.context=concat"], capsys)
    assert code == 2 and f"{data / 'dev.doc'}: no such file" in err


def test_invalid_utf8_names_file_and_line(tmp_path, capsys):
    data = small_corpus(tmp_path)
    raw = (data / "train.en").read_bytes().split(b"\n")
    raw[4] = b"caf\xe9 au lait"
    (data / "train.en").write_bytes(b"\n".join(raw))
    code, _, err = run(["prepare", write_config(tmp_path / "c.yaml", data, tmp_path / "m")], capsys)
    assert code == 2 and re.search(r"train\.en:5: invalid UTF-8", err)


def test_empty_training_file(tmp_path, capsys):
    data = small_corpus(tmp_path)
    (data / "train.es").write_text("")
    code, _, err = run(["prepare", write_config(tmp_path / "c.yaml", data, tmp_path / "m")], capsys)
    assert code == 2 and "train.es: file is empty" in err


def test_bad_config_key(tmp_path, capsys):
    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    code, _, err = run(["train", cfg, "--set", "model.hiden_dim=3"], capsys)
    assert code == 2 and "model.hiden_dim" in err and "hidden_dim" in err


def test_corrupt_and_foreign_checkpoints(tmp_path, capsys):
    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    assert run(["train", cfg, "--quiet", "--set", "training.max_updates=2", "--set", "training.valid_bleu=false"],
               capsys)[0] == 0
    best = tmp_path / "m" / "checkpoints" / "last.pt"
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(best.read_bytes()[:1000])
    (tmp_path / "in.es").write_text("el gato 3 .\n")
    code, _, err = run(["translate", tmp_path / "m", "-i", tmp_path / "in.es", "--checkpoint", truncated], capsys)
    assert code == 2 and "truncated.pt: corrupt, truncated or not a ctxnmt checkpoint" in err
    # A checkpoint of a model with another vocabulary is refused by name.
    other = write_config(tmp_path / "o.yaml", data, tmp_path / "other")
    assert run(["train", other, "--quiet", "--set", "training.max_updates=1", "--set", "data.bpe_merges=5",
                "--set", "training.valid_bleu=false"], capsys)[0] == 0
    code, _, err = run(["translate", tmp_path / "m", "-i", tmp_path / "in.es", "--checkpoint",
                        tmp_path / "other" / "checkpoints" / "last.pt"], capsys)
    assert code == 2 and "different vocabulary" in err
    out = tmp_path / "out.en"
    code, _, _ = run(["translate", tmp_path / "m", "-i", tmp_path / "in.es", "-o", out, "--checkpoint", truncated],
                     capsys)
    assert code == 2 and not out.exists()


def test_checkpoint_is_best_last_or_a_file(tmp_path, capsys, monkeypatch):
    """translate took a file and lm score a name; every --checkpoint takes either now, and one
    that is neither is refused by name."""
    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    assert run(["train", cfg, "--quiet", "--set", "training.max_updates=2", "--set", "training.valid_bleu=false"],
               capsys)[0] == 0
    checkpoints = tmp_path / "m" / "checkpoints"
    (checkpoints / "best.pt").write_bytes(b"not a checkpoint")  # so that only last.pt translates
    (tmp_path / "in.es").write_text("el gato 3 .\n")
    monkeypatch.chdir(tmp_path)  # holds no file named best or last
    translate = ["translate", tmp_path / "m", "-i", tmp_path / "in.es", "--checkpoint"]
    code, by_name, _ = run([*translate, "last"], capsys)
    assert code == 0 and by_name.count("\n") == 1
    assert run([*translate, checkpoints / "last.pt"], capsys) == (0, by_name, "")
    code, _, err = run([*translate, "best"], capsys)
    assert code == 2 and "best.pt: corrupt, truncated or not a ctxnmt checkpoint" in err
    (checkpoints / "best.pt").unlink()
    for name, message in (("best", f"--checkpoint best: no {checkpoints / 'best.pt'} and no file 'best'"),
                          ("nothing.pt", "--checkpoint nothing.pt: no such file")):
        code, _, err = run([*translate, name], capsys)
        assert code == 2 and err == f"ctxnmt translate: error: {message} (give best, last or a checkpoint file)\n"


def test_every_checkpoint_option_is_the_shared_one():
    """One meaning for --checkpoint (utils.arguments.add_checkpoint) wherever a command has one."""
    parser = build_parser()
    found = []
    for path in command_paths(parser):
        here = parser
        for name in path:
            here = next(a for a in here._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        found += [(path, a.metavar) for a in here._actions if "--checkpoint" in a.option_strings]
    assert (("lm", "score"), "best|last|FILE") in found and (("translate",), "best|last|FILE") in found
    assert {metavar for _, metavar in found} == {"best|last|FILE"}, found


def test_translate_missing_model_dir(tmp_path, capsys):
    code, _, err = run(["translate", tmp_path / "nothing"], capsys)
    assert code == 2 and "not a model directory" in err


@pytest.mark.parametrize("flag,value", [("--beam", "0"), ("--beam", "-2"), ("--nbest", "0"), ("--batch-size", "-1")])
def test_translate_search_sizes_below_one_are_refused_before_loading(tmp_path, capsys, flag, value):
    """--nbest 0 printed empty lines and exited 0; --beam 0 used the config's beam; negative
    values were tracebacks."""
    code, _, err = run(["translate", tmp_path / "nothing", flag, value], capsys)
    assert code != 0 and err.strip() == f"ctxnmt translate: error: {flag} must be at least 1, got {value}"


@pytest.mark.parametrize("flag", ["-o", "--attention"])
@pytest.mark.parametrize("where", ["missing-dir/out.txt", "a-directory"])
def test_translate_outputs_that_cannot_be_written_are_refused_before_loading(tmp_path, capsys, flag, where):
    """Outputs were written only after translating: a missing directory was a traceback then,
    and a directory in the output's place failed once all the work was done."""
    (tmp_path / "a-directory").mkdir()
    out = tmp_path / where
    code, _, err = run(["translate", tmp_path / "nothing", flag, out], capsys)
    said = "is a directory, not a file to write" if where == "a-directory" else \
        f"there is no directory {tmp_path / 'missing-dir'} to write it in"
    assert code == 2 and err.strip() == f"ctxnmt translate: error: {out}: {said}"


def test_score_buckets_into_a_missing_directory_is_refused_before_scoring(tmp_path, capsys):
    for name in ("h", "r", "s"):
        (tmp_path / name).write_text("a b .\n", encoding="utf-8")
    out = tmp_path / "missing" / "b.png"
    code, _, err = run(["score", "--hyp", tmp_path / "h", "--ref", tmp_path / "r", "--src", tmp_path / "s",
                        "--buckets", out], capsys)
    assert code == 2 and err.strip() == (f"ctxnmt score: error: {out}: there is no directory {out.parent} "
                                         "to write it in")


def test_a_model_dir_that_is_a_file_or_cannot_be_made_is_one_line(tmp_path, capsys):
    data = small_corpus(tmp_path)
    (tmp_path / "taken").write_text("a file\n")
    for model_dir, said in ((tmp_path / "taken", "is a file, not a directory"),
                            (Path("/proc/ctxnmt-test"), "cannot be made a directory (")):
        code, _, err = run(["train", write_config(tmp_path / "c.yaml", data, model_dir), "--quiet"], capsys)
        assert code == 2 and err.strip().startswith(f"ctxnmt train: error: {model_dir}: {said}"), err  # tracebacks


def test_the_bible_into_a_file_is_refused_before_diatheke_runs(tmp_path, capsys):
    (tmp_path / "taken").write_text("a file\n")
    code, _, err = run(["data", "bible", "--out", tmp_path / "taken"], capsys)
    assert code == 2 and err.strip() == f"ctxnmt data: error: {tmp_path / 'taken'}: is a file, not a directory"


def test_an_os_error_on_a_named_file_is_one_line_and_any_other_keeps_its_traceback(monkeypatch, capsys):
    import ctxnmt.evaluation.commands as score_commands

    def denied(args):
        raise PermissionError(13, "Permission denied", "/srv/refs.en")

    monkeypatch.setattr(score_commands, "run_score", denied)
    code, _, err = run(["score", "--hyp", "h", "--ref", "r"], capsys)
    assert code == 2 and err.strip() == "ctxnmt score: error: /srv/refs.en: Permission denied"

    def ours(args):
        raise OSError("a fault of ours, not the user's")

    monkeypatch.setattr(score_commands, "run_score", ours)
    with pytest.raises(OSError, match="a fault of ours"):
        run(["score", "--hyp", "h", "--ref", "r"], capsys)


def test_a_directory_of_the_other_kind_of_model_is_named_as_such(tmp_path, capsys):
    """Each had said 'unknown config key' about the other kind's config.yaml."""
    from ctxnmt.config import Config, save_config
    from ctxnmt.lm.config import LMConfig

    (tmp_path / "in.txt").write_text("a b .\n", encoding="utf-8")
    for name, config in (("lm", LMConfig()), ("nmt", Config())):
        (tmp_path / name).mkdir()
        save_config(config, tmp_path / name / "config.yaml")
    code, _, err = run(["translate", tmp_path / "lm", "-i", tmp_path / "in.txt"], capsys)
    assert code == 2 and err.strip() == (f"ctxnmt translate: error: {tmp_path / 'lm'}: a language model's directory "
                                         "(ctxnmt lm score reads it), not a translation model's")
    code, _, err = run(["lm", "score", tmp_path / "nmt", "-i", tmp_path / "in.txt"], capsys)
    assert code == 2 and err.strip() == (f"ctxnmt lm: error: {tmp_path / 'nmt'}: a translation model's directory "
                                         "(ctxnmt translate reads it), not a language model's")


def test_overlong_input_is_translated_in_pieces_with_a_warning(tmp_path, capsys):
    from ctxnmt.decoding.translator import Translator

    data = small_corpus(tmp_path)
    cfg = write_config(tmp_path / "c.yaml", data, tmp_path / "m")
    assert run(["train", cfg, "--quiet", "--set", "training.max_updates=2", "--set", "training.valid_bleu=false"],
               capsys)[0] == 0
    translator = Translator.load(tmp_path / "m")
    translator.config.decoding.max_src_len = 4
    warnings = []
    translator.warn = warnings.append
    lines = ["el gato 1 .", "", "el gato 2 . el gato 3 . el gato 4 . el gato 5 ."]
    out = translator.translate(lines, beam=2)
    assert len(out) == 3 and out[1].text == ""
    assert len(warnings) == 1 and warnings[0].startswith("input line 3 ")
    assert "pieces" in warnings[0]


def test_a_command_module_that_fails_to_import_is_an_error_not_a_missing_command(tmp_path, capsys, monkeypatch):
    """A command whose family's module cannot be imported stays in --help, and running it (or
    asking for its --help) stops the CLI with one line naming the module (it used to vanish
    from --help); the other commands still work."""
    import sys

    from ctxnmt import cli

    (tmp_path / "ctxnmt_broken_commands.py").write_text("import ctxnmt_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "score", ("ctxnmt_broken_commands", "the broken score"))
    for args in (["score", "--help"], ["score", "--hyp", "h", "--ref", "r"]):
        code, out, err = run(args, capsys)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "cannot load the commands of ctxnmt_broken_commands: No module named 'ctxnmt_no_such_dependency'" in err
    code, out, _ = run([], capsys)
    assert code == 0 and "the broken score" in out
    with pytest.raises(SystemExit) as stopped:
        main(["data", "--help"])
    assert stopped.value.code == 0 and capsys.readouterr().out.startswith("usage: ctxnmt data")
    monkeypatch.setitem(cli.COMMANDS, "score", ("ctxnmt_missing_commands", "gone"))
    sys.modules.pop("ctxnmt_broken_commands", None)
    code, _, err = run(["score", "--help"], capsys)
    assert code == 2 and "cannot load the commands of ctxnmt_missing_commands" in err


@pytest.mark.parametrize("line, message", [
    ('sub.add_parser("compile")', "command 'compile' is not in COMMANDS of ctxnmt.cli"),
    ('sub.add_parser("score", help="score")', "command 'score': its line in --help is in COMMANDS"),
])
def test_a_command_s_line_in_help_has_one_place(tmp_path, capsys, monkeypatch, line, message):
    """COMMANDS lists every command with its line in --help, so that --help imports no family:
    a family that registers a command it lacks, or gives the line itself, is told so."""
    import sys

    from ctxnmt import cli

    (tmp_path / "ctxnmt_new_commands.py").write_text(f"def register(sub):\n    {line}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ctxnmt_new_commands", raising=False)  # the other case's
    monkeypatch.setitem(cli.COMMANDS, "score", ("ctxnmt_new_commands", "score"))
    code, _, err = run(["score"], capsys)
    assert code == 2 and message in err


def test_help_and_version_load_no_torch():
    """`ctxnmt --help` and `--version` import no command family, so none of the heavy libraries
    (they took 3.9 s, 2.1 s of it torch); a command's family is imported when it is chosen."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from ctxnmt.cli import main\n"
            "for argv in (['--help'], ['--version'], []):\n"
            "    try:\n"
            "        assert main(argv) == 0\n"
            "    except SystemExit as stop:\n"
            "        assert stop.code == 0, stop\n"
            "heavy = [name for name in ('torch', 'numpy', 'scipy', 'sacremoses') if name in sys.modules]\n"
            "assert not heavy, heavy\n"
            "main(['translate', '--help'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: ctxnmt [-h] [--version] COMMAND" in done.stdout and "usage: ctxnmt translate" in done.stdout


@pytest.mark.parametrize("argv, usage, suggestion", [
    (["translate", "runs/demo", "--beam-size", "5"], "ctxnmt translate", "--beam-size 5; did you mean --beam?"),
    (["score", "--hyp", "h", "--lnag=en"], "ctxnmt score", "--lnag=en; did you mean --lang?"),
    (["analyze", "curve", "runs/demo", "--plt=c.png"], "ctxnmt analyze curve", "--plt=c.png; did you mean --plot?"),
])
def test_an_unknown_option_gets_its_command_s_usage_and_the_closest_option(capsys, argv, usage, suggestion):
    """It printed the top-level usage, and no suggestion; difflib alone takes --batch-size for
    --beam-size."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith(f"usage: {usage} ")
    assert err.strip().splitlines()[-1] == f"{usage}: error: unrecognized arguments: {suggestion}"


def test_every_command_but_serve_loads_without_the_web_stack():
    """A GPU machine may lack fastapi and uvicorn: the CLI still trains and translates, and
    `serve` alone needs them (it imports them when it serves)."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['fastapi'] = None; sys.modules['uvicorn'] = None\n"
            "from ctxnmt.cli import main\n"
            "raise SystemExit(main(['train', '--help']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: ctxnmt train" in done.stdout


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and nested sub-command of the parser, as the words that name it."""
    found = [prefix]
    for action in parser._actions:  # argparse keeps its sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += command_paths(child, (*prefix, name))
    return found


def test_every_command_and_sub_command_prints_its_help(capsys):
    """--help works at every level (`ctxnmt judge --help` once died of an unescaped % in a
    sub-command's help line, which argparse formats only in its parent's help)."""
    paths = command_paths(build_parser())
    assert ("judge", "report") in paths and ("lm", "score") in paths and len(paths) > 20
    for path in [p for p in paths if p != ("lm", "compare")]:  # gone: any arguments get its one line
        with pytest.raises(SystemExit) as stopped:
            main([*path, "--help"])
        out, _ = capsys.readouterr()
        assert stopped.value.code == 0 and out.startswith(f"usage: {' '.join(('ctxnmt', *path))}"), path
