import { Observable } from 'rxjs';
import type { ClusterJobEvent, JobEvent, PgQueue } from '../engine/index.js';

/**
 * The engine's job events as an Observable (`QueueService.events$`): each subscription is one
 * `onJobEvent` listener, removed on unsubscribe, and it completes when the engine stops (at once
 * for a subscription made after). rxjs lives here, in the Nest layer; the engine has plain
 * listeners. A subscriber that throws is rxjs's to report, as with any Observable.
 */
export function jobEvents$(engine: Pick<PgQueue, 'onJobEvent'>): Observable<JobEvent> {
  return listened((next, complete) => engine.onJobEvent(next, complete));
}

/** The cluster's job events (`QueueService.clusterEvents$`), the same way over `onClusterEvent`. */
export function clusterEvents$(engine: Pick<PgQueue, 'onClusterEvent'>): Observable<ClusterJobEvent> {
  return listened((next, complete) => engine.onClusterEvent(next, complete));
}

/** An engine listener per subscription: `listen` adds it and returns its removal. */
function listened<E>(listen: (next: (event: E) => void, complete: () => void) => () => void): Observable<E> {
  return new Observable<E>((subscriber) =>
    listen(
      (event) => subscriber.next(event),
      () => subscriber.complete(),
    ),
  );
}
