/**
 * Field readers for JSON the gateway sent: each returns the value when it has the
 * expected type, else null, so a record with an odd field is still usable.
 */
export type Obj = Record<string, unknown>;

export function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function str(o: Obj, k: string): string | null {
  const v = o[k];
  return typeof v === "string" ? v : null;
}

export function int(o: Obj, k: string): number | null {
  const v = o[k];
  return typeof v === "number" && Number.isInteger(v) ? v : null;
}

export function num(o: Obj, k: string): number | null {
  const v = o[k];
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}
