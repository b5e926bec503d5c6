"""The OpenAI Python client parses the replica's responses: completions and chat, streaming and not."""

from __future__ import annotations

import openai
import pytest

pytestmark = pytest.mark.anyio


async def test_openai_client_completions_and_chat(start_replica) -> None:
    async with start_replica(served_model_name="drill-llama") as replica:
        client = openai.AsyncOpenAI(base_url=replica.server.url + "/v1", api_key="unused", max_retries=0)
        try:
            models = await client.models.list()
            completion = await client.completions.create(
                model="drill-llama", prompt="one two three", max_tokens=4, temperature=0
            )
            chunks = [
                chunk
                async for chunk in await client.completions.create(
                    model="drill-llama",
                    prompt="one two three",
                    max_tokens=4,
                    temperature=0,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            ]
            chat = await client.chat.completions.create(
                model="drill-llama", max_tokens=3, messages=[{"role": "user", "content": "hi"}]
            )
            chat_chunks = [
                chunk
                async for chunk in await client.chat.completions.create(
                    model="drill-llama",
                    max_tokens=3,
                    stream=True,
                    stream_options={"include_usage": True},
                    messages=[{"role": "user", "content": "hi"}],
                )
            ]
            with pytest.raises(openai.NotFoundError) as missing:
                await client.completions.create(model="other", prompt="x", max_tokens=1)
            with pytest.raises(openai.BadRequestError) as too_long:
                await client.completions.create(model="drill-llama", prompt="x " * 9000, max_tokens=1)
        finally:
            await client.close()
    assert [model.id for model in models.data] == ["drill-llama"]
    assert completion.choices[0].finish_reason == "length" and completion.usage.completion_tokens == 4
    streamed = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    assert streamed == completion.choices[0].text  # greedy: the same tokens streamed or not
    assert chunks[-1].usage.total_tokens == 3 + 4 and chunks[-1].choices == []
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens == 3
    assert chat_chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chat_chunks if c.choices).count(" ") == 3
    assert chat_chunks[-1].usage.completion_tokens == 3
    assert missing.value.status_code == 404 and "does not exist" in missing.value.message
    assert too_long.value.status_code == 400 and "maximum context length is 8192" in too_long.value.message
