"""kefu configuration: one pydantic-settings model, validated before anything starts."""

from config.settings import (
    AdmissionSettings,
    AgentSettings,
    AlertSettings,
    CheckpointSettings,
    DeliverySettings,
    DingTalkSettings,
    ListenerSettings,
    MemorySettings,
    OpenAISettings,
    OutboxSettings,
    RecallSettings,
    ReconcileSettings,
    Settings,
    SettingsError,
    SimulatorSettings,
    load_settings,
)

__all__ = [
    "AdmissionSettings",
    "AlertSettings",
    "AgentSettings",
    "CheckpointSettings",
    "DeliverySettings",
    "DingTalkSettings",
    "ListenerSettings",
    "MemorySettings",
    "OpenAISettings",
    "OutboxSettings",
    "RecallSettings",
    "ReconcileSettings",
    "Settings",
    "SettingsError",
    "SimulatorSettings",
    "load_settings",
]
