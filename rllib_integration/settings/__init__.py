"""Run settings: the one typed schema (pydantic) of every setting of an AT-GRPO run.

Everything else derives from :class:`RunSettings`: YAML validation (:func:`load_config`,
``--set``), the attributes, defaults and builder-method keywords of ``ATGRPOConfig``,
``ATGRPOConfig.validate()``, ``ATGRPOConfig.from_run_config`` and docs/config_reference.md
(``python -m rllib_integration.settings --markdown``; a test keeps the committed file equal).

A run config is a nested mapping (YAML) with the sections of :class:`RunSettings`. Each
setting has ONE name, and one rule turns it into the ``ATGRPOConfig`` attribute and builder
keyword: the attribute is the YAML key (``rollout.backend`` -> ``backend``), except in the
sections ``env``, ``model`` and ``evaluation``, where it is ``<section>_<key>``
(``model.path`` -> ``model_path``, ``evaluation.temperature`` -> ``evaluation_temperature``),
as RLlib names its own settings of these (``env_config``, ``model_config``,
``evaluation_interval``). Outside those three sections no key names one of RLlib's
``AlgorithmConfig`` attributes (but RLlib's own settings: ``lr``, ``seed``, ...) or is the key of
another such section, so no attribute clashes (a test checks the rule for every setting). Two
settings are RLlib's own under RLlib's name: ``env.id`` is ``env`` and ``policy_mapping`` is
``policy_mapping_fn`` (a function); ``lora`` and ``warm_start`` are one dict attribute each, and
``policies.<id>.*`` are RLlib's per-module overrides. The names of the previous release (``generation_backend``,
``rollout.num_rollout_workers``, ...: :data:`OLD_ATTRIBUTES`, :data:`OLD_KEYS`) still work, with a
warning naming the new one (``FutureWarning`` for keys in a run config, ``--set`` and a checkpoint;
``DeprecationWarning`` for attributes and builder keywords).

Adding a setting is a one-place change: add a field to its section model in :mod:`.schema` with
``setting(default, "meaning", ...)`` (constraints such as ``ge=1`` as in ``pydantic.Field``).
YAML validation, ``ATGRPOConfig.<attr>`` (initialised to the default), the builder keyword
(``.<builder>(<attr>=...)``, the section's builder unless ``builder=`` says otherwise),
``from_run_config``, ``validate()`` and the docs follow; then regenerate the docs.

Validation happens in plain Python, *before* Ray starts: an unknown key or a bad value raises
:class:`ConfigError` naming the dotted key (with a close-match suggestion), and a model path
that does not exist is reported with how to fix it.

The package, by job:

=================  =========================================================================
``schema``         the sections, :class:`RunSettings`, :func:`setting`, the vocabularies
``values``         value types beyond pydantic's (numbers, model specs, stop strings, env ids)
``table``          :data:`SETTINGS` and the translations to and from ``ATGRPOConfig``
``errors``         :class:`ConfigError`, :class:`UsageError`, pydantic errors in our words
``validation``     :func:`validate_settings`, :func:`validate_config` (checks across settings)
``files``          YAML, ``--set``, :data:`DEFAULT_CONFIG`, :func:`load_config`
``reference``      docs/config_reference.md (``python -m rllib_integration.settings --markdown``)
=================  =========================================================================

It imports neither Ray nor torch: the command line validates a run config with it before Ray starts.
"""

from __future__ import annotations

from .errors import ConfigError, UsageError
from .files import DEFAULT_CONFIG, apply_overrides, load_config, load_yaml, resolve_model_spec
from .reference import markdown
from .schema import (AGG_MODES, DTYPES, ESTIMATORS, GENERATION_BACKENDS, GROUP_FIELDS, KL_ESTIMATORS, LEVELS,
                     LORA_DEFAULTS, PER_POLICY, SAMPLING_MODES, SANDBOX_KINDS, PolicySettings, RunSettings, setting)
from .table import (OLD_ATTRIBUTES, OLD_KEYS, SETTINGS, SettingInfo, attribute_name, builder_calls, builder_keywords,
                    config_attributes, default_of, renamed_keys, settings_of, warn_renamed)
from .validation import validate_config, validate_settings
from .values import TINY_MODEL_ARGS

__all__ = ["ConfigError", "UsageError", "RunSettings", "SettingInfo", "SETTINGS", "DEFAULT_CONFIG", "load_config",
           "validate_config", "validate_settings", "apply_overrides", "resolve_model_spec", "load_yaml", "markdown",
           "config_attributes", "default_of", "builder_keywords", "builder_calls", "settings_of", "attribute_name",
           "LEVELS", "ESTIMATORS", "AGG_MODES", "KL_ESTIMATORS", "GROUP_FIELDS", "SANDBOX_KINDS",
           "GENERATION_BACKENDS", "SAMPLING_MODES", "DTYPES", "LORA_DEFAULTS", "PER_POLICY", "PolicySettings",
           "TINY_MODEL_ARGS", "setting", "OLD_ATTRIBUTES", "OLD_KEYS", "renamed_keys", "warn_renamed"]
