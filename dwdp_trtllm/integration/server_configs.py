"""The TensorRT-LLM servers a deployer's YAML files describe, read as TensorRT-LLM reads them (pure, no tensorrt_llm).

Two kinds of file:
- an extra-llm-api YAML (`trtllm-serve MODEL --extra_llm_api_options FILE`, or the recipe's per-server config): one
  server's LLM args. Its role (context or generation) is what the caller says, else its file name (a name holding
  "gen" is a generation server, any other a context server: gen-config's ctx_server.yaml / gen_server.yaml);
- a disaggregated YAML (`trtllm-serve disaggregated -c`, `disaggregated_mpi_worker -c`): `context_servers` and
  `generation_servers` sections, each one kind of server with `num_instances`, `urls` and `router` beside its LLM
  args. As upstream's extract_disagg_cfg (tensorrt_llm/llmapi/disagg_utils.py @ 0228a7122341): every top-level key
  that is not one of the proxy's own parameters is inherited into both sections (the same key with another value in
  a section is an error), and extract_ctx_gen_cfgs / extract_router_config take num_instances, urls and router out.
Errors are ConfigError naming the file and key (exit 2, one line).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import yaml

from ..errors import ConfigError
from ..spec.yaml_safe import safe_load

#: extract_disagg_cfg's own parameters (disagg_utils.py @ 0228a7122341): the proxy's, not inherited by the servers
PROXY_KEYS = ("hostname", "port", "max_retries", "perf_metrics_max_requests", "return_perf_metrics",
              "perf_metrics_output_dir", "conditional_disagg_config", "otlp_config", "disagg_cluster", "node_id",
              "schedule_style", "allow_request_chat_template", "gen_strip_message_history", "gen_tokids_ctxbytes",
              "num_workers", "disagg_coordinator_url")
SECTIONS = {"context_servers": "context", "generation_servers": "generation"}
#: keys of a server section that are not LLM args (extract_ctx_gen_cfgs: num_instances, urls; extract_router_config)
SERVER_KEYS = ("num_instances", "urls", "router")
ROLES = ("context", "generation")


@dataclass(frozen=True)
class ServerConfig:
    """One kind of server: the file, its name there (the section, or the file's name), its role, how many instances
    and how the role was decided, and the LLM args TensorRT-LLM builds it with."""

    file: str
    name: str
    role: str
    instances: int
    args: dict
    role_from: str = "its section"


def role_of_name(path: str) -> str:
    """A file's role from its name: 'generation' when the name holds "gen", else 'context'."""
    return "generation" if "gen" in Path(path).name.lower() else "context"


def load_mapping(path: str) -> dict:
    """The YAML file as a mapping; ConfigError naming the file for a missing, unreadable, non-UTF-8 or non-mapping one."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(path, "", "no such file") from None
    except IsADirectoryError:
        raise ConfigError(path, "", "expected a YAML file, got a directory") from None
    except OSError as e:
        raise ConfigError(path, "", f"cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(path, "", f"expected UTF-8 text (byte {e.start} is not)") from None
    try:
        data = safe_load(text, file=path)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(path, "", f"not valid YAML{where} ({getattr(e, 'problem', None) or 'parse error'})") from None
    if not isinstance(data, dict):
        raise ConfigError(path, "", "expected a mapping: TensorRT-LLM settings (an extra-llm-api YAML) or "
                                    "context_servers / generation_servers (a disaggregated YAML), got "
                                    + ("an empty file" if data is None else type(data).__name__))
    return data


def read_servers(path: str, role: str | None = None) -> list[ServerConfig]:
    """Every kind of server the file describes (module docstring); role: force it for an extra-llm-api file."""
    data = load_mapping(path)
    if not any(k in data for k in SECTIONS):
        if role is None:
            role, how = role_of_name(path), "its file name"
        else:
            how = "as given"
        return [ServerConfig(path, Path(path).name, role, 1, data, how)]
    inherited = {k: v for k, v in data.items() if k not in PROXY_KEYS and k not in SECTIONS}
    out = []
    for section, kind in SECTIONS.items():
        sec = data.get(section)
        if sec is None:
            continue
        if not isinstance(sec, dict):
            raise ConfigError(path, section, f"expected a mapping of the {kind} servers' settings, got "
                                             f"{type(sec).__name__}")
        for k, v in inherited.items():
            if k in sec and sec[k] != v:
                raise ConfigError(path, f"{section}.{k}", "given at the top level too, with another value (TensorRT-LLM "
                                                          "refuses that: extract_disagg_cfg)")
        n = sec.get("num_instances", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(path, f"{section}.num_instances", f"expected an integer of at least 1, got {n!r}")
        args = {k: v for k, v in {**inherited, **sec}.items() if k not in SERVER_KEYS}
        out.append(ServerConfig(path, section, kind, n, args))
    return out
