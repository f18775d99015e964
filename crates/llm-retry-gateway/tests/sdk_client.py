"""One call through the gateway with an official SDK, as a user makes it.

usage: sdk_client.py {anthropic|openai} {plain|stream} BASE_URL

Prints one JSON line: {"status": 200, "text": "..."} on success, or
{"error_status": 429, "error": "RateLimitError"} when the SDK raised.
The SDKs keep their default retry settings (2 retries).
"""

import json
import sys


def anthropic_call(base, stream):
    import anthropic

    client = anthropic.Anthropic(base_url=base, api_key="sk-ant-test")
    args = dict(
        model="claude-sonnet-4-5",
        max_tokens=64,
        messages=[{"role": "user", "content": "Hi"}],
    )
    if stream:
        with client.messages.stream(**args) as events:
            return "".join(events.text_stream)
    return client.messages.create(**args).content[0].text


def openai_call(base, stream):
    import openai

    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test")
    args = dict(model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}])
    if stream:
        chunks = client.chat.completions.create(stream=True, **args)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return client.chat.completions.create(**args).choices[0].message.content


def main():
    sdk, mode, base = sys.argv[1], sys.argv[2], sys.argv[3]
    call = anthropic_call if sdk == "anthropic" else openai_call
    try:
        text = call(base, mode == "stream")
        print(json.dumps({"status": 200, "text": text}))
    except Exception as error:  # the SDKs' APIStatusError carries the status
        status = getattr(error, "status_code", None)
        print(json.dumps({"error_status": status, "error": type(error).__name__}))


main()
