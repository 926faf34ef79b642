"""Single-request writes of small objects to s3:// and gs://, optionally only if the object does not exist.

Beam's FileSystems write every object through an upload session (S3: a multipart upload). Two things it
cannot do are done here with the stores' own clients, configured the way Beam's filesystems are:

- an EMPTY object on s3://: Beam's ``S3Uploader`` completes a multipart upload with zero parts, which S3
  refuses (``MalformedXML``); one ``PutObject`` writes it.
- create-if-absent (the build lock): S3 ``PutObject`` with ``If-None-Match: *`` and GCS uploads with
  ``ifGenerationMatch=0`` fail when the object exists, so two builds cannot both take the lock.

S3 goes through Beam's own boto3 client wrapper with the options given to ``FileSystems.set_options``
(``--s3_endpoint_url``, ``--s3_access_key_id`` ...; boto3's environment otherwise). GCS goes through
google-cloud-storage's ``Client()`` (Application Default Credentials; ``STORAGE_EMULATOR_HOST`` for a
GCS-compatible server), as Beam's GcsIO does.
"""

from __future__ import annotations

from apache_beam.io.filesystems import FileSystems


def supports(path: str) -> bool:
    return path.startswith(("s3://", "gs://"))


def _bucket_key(path: str) -> tuple[str, str]:
    bucket, _, key = path.split("://", 1)[1].partition("/")
    if not bucket or not key:
        raise ValueError(f"{path}: not an object path (scheme://bucket/key)")
    return bucket, key


def _s3_put(path: str, data: bytes, mime_type: str, if_absent: bool) -> bool:
    from apache_beam.io.aws.clients.s3 import boto3_client
    from botocore.exceptions import BotoCoreError

    # The options FileSystems.set_options gave (None when never set: boto3 then reads its environment).
    options = getattr(FileSystems.get_filesystem(path), "_options", None) or {}
    client = boto3_client.Client(options=options).client
    bucket, key = _bucket_key(path)
    extra = {"IfNoneMatch": "*"} if if_absent else {}
    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, ContentType=mime_type, **extra)
    except client.exceptions.ClientError as e:
        if if_absent and e.response.get("Error", {}).get("Code") in (
            "PreconditionFailed",
            "ConditionalRequestConflict",
        ):
            return False
        raise OSError(f"{path}: PutObject failed: {e}") from None
    except BotoCoreError as e:  # no credentials, endpoint unreachable, ...
        raise OSError(f"{path}: PutObject failed: {e}") from None
    return True


def _gcs_put(path: str, data: bytes, mime_type: str, if_absent: bool) -> bool:
    import google.cloud.storage as storage
    from google.api_core import exceptions
    from google.auth.exceptions import GoogleAuthError

    bucket, key = _bucket_key(path)
    blob = storage.Client().bucket(bucket).blob(key)
    try:
        blob.upload_from_string(data, content_type=mime_type, if_generation_match=0 if if_absent else None)
    except exceptions.PreconditionFailed:
        return False
    except (exceptions.GoogleAPIError, GoogleAuthError) as e:  # GoogleAPIError: HTTP errors and retries given up
        raise OSError(f"{path}: upload failed: {e}") from None
    return True


def put_object(path: str, data: bytes, *, if_absent: bool = False, mime_type: str = "application/octet-stream") -> bool:
    """Write ``data`` to the s3:// or gs:// ``path`` in one request; with ``if_absent``, only if no object is
    there (False then, and nothing is written)."""
    if path.startswith("s3://"):
        return _s3_put(path, data, mime_type, if_absent)
    if path.startswith("gs://"):
        return _gcs_put(path, data, mime_type, if_absent)
    raise ValueError(f"{path}: put_object writes s3:// and gs:// objects only")
