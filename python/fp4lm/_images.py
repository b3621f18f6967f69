"""Images for fp4lm.LLM, taken as vLLM's offline API takes them: `multi_modal_data={"image": ...}`
in LLM.generate, image content parts in LLM.chat, and the `limit_mm_per_prompt` and
`allowed_local_media_path` constructor arguments. Each image becomes (name, encoded bytes) for
Engine.attach_images, which decodes it (JPEG, PNG, WebP, by its magic bytes), preprocesses and
encodes it as `fp4lm generate --image` does; `name` is what its errors call it.

Pillow is never imported here: a PIL image is recognised by its class, which exists only when the
caller imported PIL.Image; it is handed over as a PNG written in memory (lossless)."""
import io
import json
import os
import sys

from . import _core

ACCEPTED = "a PIL.Image.Image, encoded image bytes (PNG, JPEG or WebP) or an image file's path (str or os.PathLike)"
# vLLM's default when limit_mm_per_prompt does not name a modality (vLLM V1).
DEFAULT_IMAGE_LIMIT = 999
# The modes PNG stores and the decoder turns into RGB as transformers' convert_to_rgb does (alpha
# composited onto white); any other mode goes through Pillow's convert("RGBA") first, as
# convert_to_rgb itself does.
_PNG_MODES = ("1", "L", "LA", "P", "RGB", "RGBA")


def parse_limit(limit_mm_per_prompt):
    """The image limit of vLLM's `limit_mm_per_prompt` ({"image": N}, or {"image": {"count": N}}),
    read by the engine's rule (the one `fp4lm serve --limit-mm-per-prompt` uses): a video or audio
    limit is accepted and, above 0, logged as having no effect (fp4lm takes images only)."""
    if limit_mm_per_prompt is None:
        return DEFAULT_IMAGE_LIMIT
    if not isinstance(limit_mm_per_prompt, dict):
        raise ValueError(f"limit_mm_per_prompt must be a dict such as {{'image': 2}}, got {limit_mm_per_prompt!r}")
    try:
        text = json.dumps(limit_mm_per_prompt)
    except (TypeError, ValueError) as e:
        raise ValueError(f"limit_mm_per_prompt: {e}") from None
    return _core.image_limit(text, "limit_mm_per_prompt", True)


def parse_video_limit(limit_mm_per_prompt):
    """The video limit of the same dict ({"video": N}; vLLM's 999 when not named)."""
    if limit_mm_per_prompt is None:
        return DEFAULT_IMAGE_LIMIT
    return _core.video_limit(json.dumps(limit_mm_per_prompt), "limit_mm_per_prompt")


class MediaList(list):
    """A prompt's images (the list itself, as before) and its videos (`videos`: (name, frames) pairs,
    each frame (name, bytes, width, height) as Engine.attach_images takes it)."""

    def __init__(self, images=(), videos=()):
        super().__init__(images)
        self.videos = list(videos)


def check_limit(count, limit, where):
    if count > limit:
        raise ValueError(f"{where}: At most {limit} image(s) may be provided in one prompt. "
                         "Set `limit_mm_per_prompt` to increase this limit.")


def _pil_image_class():
    pil = sys.modules.get("PIL.Image")
    return getattr(pil, "Image", None) if pil is not None else None


def _pil_png(img):
    if img.mode not in _PNG_MODES:
        img = img.convert("RGBA")
    buf = io.BytesIO()
    # No EXIF: transformers' processors use a PIL image's pixels as they are (no exif_transpose).
    img.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def read_image_file(path, name):
    """An image file's bytes, refusing one larger than the decoder takes before reading it all."""
    limit = _core.max_image_bytes
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ValueError(f"{name}: cannot read image file '{path}': {e.strerror or e}") from None
    if len(data) > limit:
        raise ValueError(f"{name}: '{path}' is more than {limit} bytes, the most an image may have")
    return data


def image_bytes(item, name):
    """(name, bytes) for one image given as ACCEPTED; TypeError naming it for anything else."""
    pil = _pil_image_class()
    if pil is not None and isinstance(item, pil):
        return f"{name} (PIL image {item.mode} {item.width}x{item.height})", _pil_png(item)
    if isinstance(item, (bytes, bytearray, memoryview)):
        return f"{name} ({len(item)} bytes)", bytes(item)
    if isinstance(item, (str, os.PathLike)):
        path = os.fsdecode(os.fspath(item))
        if path.startswith(("data:", "http://", "https://", "file://")):
            raise ValueError(f"{name}: '{path[:40]}' is a URL, but a string here is a file path "
                             "(URLs go in LLM.chat's image_url parts)")
        return f"{name} ({path})", read_image_file(path, f"{name} ({path})")
    raise TypeError(f"{name}: expected {ACCEPTED}, got {type(item).__module__}.{type(item).__qualname__}")


def multi_modal_images(mm, where, limit):
    """The (name, bytes) images of a prompt's `multi_modal_data`: {"image": one image or a list};
    their number checked against `limit` before any is read."""
    if not isinstance(mm, dict):
        raise TypeError(f"{where}: multi_modal_data must be a dict such as {{'image': image}}, "
                        f"got {type(mm).__qualname__}")
    for key in mm:
        if key not in ("image", "video"):
            raise ValueError(f"{where}: multi_modal_data[{key!r}] is not supported: fp4lm takes images and video "
                             "frames (multi_modal_data={'image': ..., 'video': [frame, ...]})")
    items = mm.get("image")
    if items is None:
        named = []
    elif isinstance(items, (list, tuple)):
        named = [(f'multi_modal_data["image"][{k}]', x) for k, x in enumerate(items)]
    else:
        named = [('multi_modal_data["image"]', items)]
    check_limit(len(named), limit, where)
    return [image_bytes(x, name) for name, x in named]


FRAME_ACCEPTED = ("a PIL.Image.Image, a numpy uint8 array of height x width x 3, encoded image bytes or an image "
                  "file's path")


def _is_ndarray(x):
    return type(x).__module__ == "numpy" and hasattr(x, "ndim") and hasattr(x, "shape")


def _frame(item, name):
    """(name, bytes, width, height) for one video frame: a numpy RGB array goes as its pixels
    (width > 0), anything image_bytes takes as its encoded bytes (width 0)."""
    if _is_ndarray(item):
        if item.ndim != 3 or item.shape[2] != 3 or str(item.dtype) != "uint8":
            raise ValueError(f"{name}: a numpy frame must be uint8 of shape (height, width, 3), got {item.dtype} "
                             f"{tuple(item.shape)}")
        h, w = int(item.shape[0]), int(item.shape[1])
        return f"{name} (array {w}x{h})", item.tobytes(order="C"), w, h
    try:
        fname, data = image_bytes(item, name)
    except TypeError:
        raise TypeError(f"{name}: expected {FRAME_ACCEPTED}, got {type(item).__module__}."
                        f"{type(item).__qualname__}") from None
    return fname, data, 0, 0


def video_frames(video, name):
    """One video as (name, frames): a list or tuple of frames, or a numpy array of frames x height
    x width x 3 (uint8), as vLLM's multi_modal_data takes pre-sampled frames."""
    if _is_ndarray(video):
        if video.ndim != 4:
            raise ValueError(f"{name}: a numpy video must have 4 dimensions (frames, height, width, 3), got shape "
                             f"{tuple(video.shape)}")
        frames = [video[k] for k in range(video.shape[0])]
    elif isinstance(video, list):
        frames = video
    else:
        raise TypeError(f"{name}: a video is a list of frames ({FRAME_ACCEPTED}) or a numpy array of frames, got "
                        f"{type(video).__module__}.{type(video).__qualname__} (video files and (frames, metadata) "
                        "pairs are not supported)")
    if not frames:
        raise ValueError(f"{name}: a video of no frames")
    return name, [_frame(f, f"{name} frame {k}") for k, f in enumerate(frames)]


def _is_one_video(items):
    if _is_ndarray(items):
        return items.ndim == 4
    return isinstance(items, list) and bool(items) and not isinstance(items[0], list) and not (
        _is_ndarray(items[0]) and items[0].ndim == 4)


def multi_modal_videos(mm, where, limit):
    """The videos of a prompt's `multi_modal_data["video"]`: one video (a list of frames or a 4-D
    numpy array) or a list of them, as vLLM tells them apart; their number checked against `limit`
    before any frame is read."""
    items = mm.get("video") if isinstance(mm, dict) else None
    if items is None:
        return []
    if isinstance(items, list) and not items:
        raise ValueError('multi_modal_data["video"]: a video of no frames (leave the key out for none)')
    if _is_ndarray(items) and items.ndim == 5:
        videos = [items[k] for k in range(items.shape[0])]
    elif _is_one_video(items):
        videos = [items]
    elif isinstance(items, list):
        videos = items
    else:
        videos = [items]  # video_frames names what it is
    named = [(f'multi_modal_data["video"][{k}]' if len(videos) > 1 else 'multi_modal_data["video"]', v)
             for k, v in enumerate(videos)]
    if len(named) > limit:
        raise ValueError(f"{where}: At most {limit} video(s) may be provided in one prompt. "
                         "Set `limit_mm_per_prompt` to increase this limit.")
    return [video_frames(v, name) for name, v in named]


class MediaOptions:
    """Where LLM.chat's image URLs may come from, as vLLM's allowed_local_media_path and
    allowed_media_domains; the URL rules themselves are the engine's (engine/media_url.h, the ones
    `fp4lm serve` applies): data: URLs always, file:// under the directory, http(s) from the hosts."""

    def __init__(self, allowed_local_media_path=None, allowed_media_domains=None):
        self.root = ""
        if allowed_local_media_path:
            self.root = _core.canonical_media_dir(os.fspath(allowed_local_media_path), "allowed_local_media_path")
        domains = allowed_media_domains or []
        if isinstance(domains, str) or not all(isinstance(d, str) for d in domains):
            raise ValueError(f"allowed_media_domains must be a list of host names, got {allowed_media_domains!r}")
        self.domains = _core.media_domains(list(domains), "allowed_media_domains")

    def load(self, url, name):
        if not isinstance(url, str):
            raise TypeError(f"{name}: the image URL must be a string, got {type(url).__qualname__}")
        return _core.load_media_url(url, name, self.root, self.domains)


# The content parts vLLM takes that carry no image fp4lm can run.
_REFUSED_PARTS = ("image_embeds", "audio_url", "input_audio", "audio_embeds", "prompt_embeds")


def chat_images(conversation, media):
    """A conversation with its image parts replaced by {"type": "image"} (what the chat template
    renders a placeholder for), and the images in order as (name, load) pairs: load() returns the
    bytes, so that the caller checks their number before any URL is read. Image parts as vLLM's
    LLM.chat: {"type": "image_url", "image_url": {"url": ...}} (or the URL as a string),
    {"type": "input_image", "image_url": ...}, {"type": "image_pil", "image_pil": img}, and the same
    without "type". Video parts {"type": "video", "video": [frame, ...]} (video_frames' forms)
    become {"type": "video"}, their (name, frames) returned third."""
    messages, images, videos = [], [], []
    for m, msg in enumerate(conversation):
        content = msg.get("content") if isinstance(msg, dict) else None
        if not isinstance(content, (list, tuple)):
            messages.append(msg)
            continue
        parts = []
        for j, part in enumerate(content):
            name = f"messages[{m}].content[{j}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind is None and isinstance(part, dict):
                kind = "image_url" if "image_url" in part else "image_pil" if "image_pil" in part else None
            if kind in ("image_url", "input_image"):
                url = part.get("image_url")
                if isinstance(url, dict):
                    url = url.get("url")
                if url is None:
                    raise ValueError(f"{name}: an {kind} part needs image_url.url")
                named = f"{name} ({kind})"
                images.append((named, lambda url=url, named=named: media.load(url, named)))
            elif kind == "image_pil":
                pil = _pil_image_class()
                img = part.get("image_pil")
                if pil is None or not isinstance(img, pil):
                    raise TypeError(f"{name}: image_pil must be a PIL.Image.Image, got {type(img).__qualname__}")
                pname, data = image_bytes(img, name)
                images.append((pname, lambda data=data: data))
            elif kind == "video":
                videos.append(video_frames(part.get("video"), name))
                parts.append({"type": "video"})
                continue
            elif kind == "video_url":
                raise ValueError(f"{name}: content part type 'video_url' is not supported: fp4lm takes video as "
                                 "frames ({'type': 'video', 'video': [frame, ...]}; no video file decoding)")
            elif kind in _REFUSED_PARTS:
                raise ValueError(f"{name}: content part type '{kind}' is not supported: fp4lm takes text and images")
            else:
                parts.append(part)
                continue
            parts.append({"type": "image"})
        messages.append({**msg, "content": parts})
    return messages, images, videos
