import net from 'node:net';

/**
 * A TCP proxy in front of PostgreSQL for one worker process: `cut()` is a network partition of
 * that worker alone (every open connection is reset and new ones are refused, so each of its
 * queries fails at once), `blackhole()` is the nastier one (nothing is forwarded any more and
 * nothing is reset, so each query and each new connection just hangs), `heal()` ends either for
 * new connections. Other processes, and the worker's recorder connection, reach the server
 * directly and are not affected.
 */
export interface TcpProxy {
  readonly port: number;
  /** Connections forwarded so far. */
  readonly accepted: number;
  readonly isCut: boolean;
  cut(): void;
  blackhole(): void;
  heal(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  const pairs = new Set<[net.Socket, net.Socket]>();
  let cut = false;
  let holes = false;
  let accepted = 0;
  const server = net.createServer((client) => {
    if (cut) {
      client.resetAndDestroy();
      return;
    }
    client.on('error', () => {});
    sockets.add(client);
    if (holes) {
      client.on('close', () => sockets.delete(client));
      return; // accepted, and never answered
    }
    accepted += 1;
    const upstream = net.connect(targetPort, targetHost);
    const pair: [net.Socket, net.Socket] = [client, upstream];
    pairs.add(pair);
    for (const socket of pair) {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => {
        sockets.delete(socket);
        pairs.delete(pair);
        // In a blackhole the worker must not learn that the server side went away.
        if (socket === upstream && holes) return;
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as net.AddressInfo;
  return {
    port,
    get accepted() {
      return accepted;
    },
    get isCut() {
      return cut;
    },
    cut() {
      cut = true;
      for (const socket of sockets) socket.resetAndDestroy();
    },
    blackhole() {
      holes = true;
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    heal() {
      cut = false;
      holes = false;
    },
    async close() {
      cut = true;
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A port on 127.0.0.1 that nothing listens on: every connect is refused at once. */
export async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
