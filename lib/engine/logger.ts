/** The engine logs through this; the Nest module passes Nest's Logger, engine users anything alike. */
export interface EngineLogger {
  log(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** Warnings and errors to the console; routine messages dropped. */
export const consoleLogger: EngineLogger = {
  log: () => {},
  warn: (message) => console.warn(`[pg-queue] ${message}`),
  error: (message) => console.error(`[pg-queue] ${message}`),
};
