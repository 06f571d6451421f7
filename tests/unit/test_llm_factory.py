"""make_summarizer / make_json_completer pick the provider the settings name."""

from __future__ import annotations

from core.llm import OpenAiLlm
from domain.extractive import ExtractiveSummarizer
from runtime.llm_factory import make_json_completer, make_summarizer
from core.llm.cache import CachedJsonCompleter, CachedSummarizer
from core.settings import LlmSettings, Settings
from tests.support.fake_openai import fake_openai  # noqa: F401


def test_offline_default_is_the_extractive_summarizer():
    summarizer = make_summarizer(Settings())
    assert isinstance(summarizer, ExtractiveSummarizer)
    assert summarizer.model == "extractive-v2"
    assert make_json_completer(Settings()) is None


def test_openai_provider_is_built_from_settings():
    settings = Settings(llm=LlmSettings(provider="openai", model="m-1", base_url="http://x/v1",
                                        summary_prompt_version="summary-v1", cache_enabled=False))
    summarizer = make_summarizer(settings)
    assert isinstance(summarizer, OpenAiLlm)
    assert (summarizer.model, summarizer.prompt_version) == ("m-1", "summary-v1")
    assert isinstance(make_json_completer(settings), OpenAiLlm)


def test_openai_provider_sits_behind_the_result_cache_by_default():
    settings = Settings(llm=LlmSettings(provider="openai", model="m-1", base_url="http://x/v1"))
    summarizer, completer = make_summarizer(settings), make_json_completer(settings)
    assert isinstance(summarizer, CachedSummarizer) and isinstance(summarizer.inner, OpenAiLlm)
    assert isinstance(completer, CachedJsonCompleter) and isinstance(completer.inner, OpenAiLlm)
    assert (summarizer.model, summarizer.prompt_version) == ("m-1", "summary-v1")


async def test_settings_from_the_fake_server_reach_it(fake_openai):
    summarizer = make_summarizer(Settings(llm=fake_openai.llm_settings(model="via-settings", cache_enabled=False)))
    out = await summarizer.summarize_window(None, [], 0, 0)
    assert out.model == "via-settings"
    assert fake_openai.chat_requests[0].model == "via-settings"
    assert fake_openai.chat_requests[0].headers["Authorization"] == "Bearer fake-key"
