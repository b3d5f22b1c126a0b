// The dashboard's calls to /ui/api, with the bearer token the user gave
// (kept in sessionStorage, so it lasts as long as the tab).

const tokenKey = "tenure-token";
const base = new URL("api/", document.baseURI.replace(/[^/]*$/, ""));

/** AuthError is a refusal: status 401 (no or unknown credentials) or 403
 * (a principal without the role). */
export class AuthError extends Error {
  constructor(message: string, readonly status: number) {
    super(message);
  }
}

export function getToken(): string {
  return sessionStorage.getItem(tokenKey) ?? "";
}

export function setToken(t: string) {
  if (t) sessionStorage.setItem(tokenKey, t);
  else sessionStorage.removeItem(tokenKey);
}

function headers(): HeadersInit {
  const t = getToken();
  return t ? { Authorization: "Bearer " + t } : {};
}

async function check(res: Response): Promise<Response> {
  if (res.status === 401) throw new AuthError("the server wants a token: enter one with read permission above", 401);
  if (res.status === 403) throw new AuthError("this token may not read here: use one with read permission, or, if its role covers only a prefix, open the page as /ui/?prefix=PREFIX", 403);
  if (!res.ok) throw new Error(`${res.status} ${(await res.text()).trim()}`);
  return res;
}

export async function api<T>(path: string): Promise<T> {
  const res = await check(await fetch(new URL(path, base), { headers: headers(), cache: "no-store" }));
  return (await res.json()) as T;
}

/** streamEvents reads a Server-Sent Events stream until it ends. */
export async function streamEvents(path: string, on: (event: string, data: unknown) => void): Promise<void> {
  const res = await check(await fetch(new URL(path, base), { headers: { ...headers(), Accept: "text/event-stream" }, cache: "no-store" }));
  if (!res.body) throw new Error("the browser cannot read a streamed response");
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let i: number;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const msg = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let event = "message";
      let data = "";
      for (const line of msg.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) on(event, JSON.parse(data));
    }
  }
}
