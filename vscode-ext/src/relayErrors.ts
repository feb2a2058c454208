/**
 * What the gateway's DAP relay says when it will not carry a debug session, in words
 * for the user: the HTTP status of a refused upgrade, or the close code of a relay.
 * The codes are docs/architecture.md's ("DAP relay").
 */

export type RelayErrorReason = "auth" | "notFound" | "busy" | "debuggee" | "unreachable" | "protocol";

export class RelayError extends Error {
  constructor(
    message: string,
    readonly reason: RelayErrorReason,
  ) {
    super(message);
    this.name = "RelayError";
  }
}

/** Relay close codes -> what the user should be told; null for a code that is no error. */
export function closeCodeError(code: number, reason: string, url: string): RelayError | null {
  const why = reason ? `: ${reason}` : "";
  switch (code) {
    case 4401:
      return new RelayError(`raydbg gateway rejected the token for ${url}${why}; set the right token with 'Ray: Set Cluster Token'`, "auth");
    case 4404:
      return new RelayError(`raydbg has no such paused session (${url})${why}; it may have resumed or ended`, "notFound");
    case 4409:
      return new RelayError(`another debugger is already attached to this paused worker${why}`, "busy");
    case 4502:
      return new RelayError(`the paused worker cannot be reached from its node's raydbg agent${why}`, "debuggee");
    default:
      return null;
  }
}

/** The gateway refused the upgrade with an HTTP status and (usually) `{"error": ...}`. */
export function upgradeError(status: number, body: string, url: string): RelayError {
  let detail = body.trim().slice(0, 300);
  try {
    const v = JSON.parse(body) as { error?: unknown };
    if (typeof v.error === "string") detail = v.error;
  } catch {
    /* plain-text body: keep it */
  }
  const why = detail ? ` (${detail})` : "";
  if (status === 401 || status === 403) {
    return new RelayError(`raydbg gateway rejected the token (HTTP ${status}) for ${url}${why}; set the right token with 'Ray: Set Cluster Token'`, "auth");
  }
  if (status === 404) return new RelayError(`raydbg gateway has no such session (HTTP 404) for ${url}${why}; it may have resumed`, "notFound");
  if (status === 409) return new RelayError(`raydbg cannot attach yet (HTTP 409)${why}`, "busy");
  return new RelayError(`raydbg gateway refused the DAP relay for ${url} (HTTP ${status})${why}`, "protocol");
}
