/** The page's one session (its transport chosen by `defaultConnect`), shared by the views. */
import { Session } from "./session";

export const session = new Session();
