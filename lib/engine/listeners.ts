/**
 * Listeners of one stream of events (this process's job events, the cluster's): each added with
 * an optional `onClose`, removable, and all closed once when the stream ends. Emitting is
 * synchronous, and a listener that throws is reported without reaching the code that emitted nor
 * keeping the others from the event.
 */
export class EventListeners<E> {
  private readonly entries = new Set<{ event: (event: E) => void; closed: (() => void) | undefined }>();
  /** Set by `complete()`: no event after it, and a listener added later is closed at once. */
  private completed = false;

  /** `reportError`: where a listener's throw goes. */
  constructor(private readonly reportError: (error: unknown) => void) {}

  /**
   * Adds a listener; returns the function that removes it. `onClose` is called once when the
   * stream ends (no event follows it), at once when it has ended already.
   */
  add(listener: (event: E) => void, onClose?: () => void): () => void {
    if (this.completed) {
      onClose?.();
      return () => {};
    }
    const entry = { event: listener, closed: onClose };
    this.entries.add(entry);
    return () => void this.entries.delete(entry);
  }

  /** How many listen: an emitter may skip building an event nobody hears. */
  get size(): number {
    return this.entries.size;
  }

  emit(event: E): void {
    for (const listener of this.entries) {
      try {
        listener.event(event);
      } catch (error) {
        // The emitter is in the middle of a job's step (or of a notification): a listener's bug must not end it.
        this.reportError(error);
      }
    }
  }

  /** Ends the stream: every listener's `onClose`, once; nothing is emitted after. */
  complete(): void {
    if (this.completed) return;
    this.completed = true;
    const closing = [...this.entries];
    this.entries.clear();
    for (const { closed } of closing) closed?.();
  }
}
