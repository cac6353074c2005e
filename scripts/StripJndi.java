// Rewrites a jar without log4j's JndiLookup class (the Log4Shell gadget), so the old
// log4j-core that DynamoDB Local bundles cannot be exploited. Run as: java StripJndi.java JAR
import java.io.*;
import java.nio.file.*;
import java.util.zip.*;

public class StripJndi {
    static final String VICTIM = "org/apache/logging/log4j/core/lookup/JndiLookup.class";

    public static void main(String[] args) throws IOException {
        Path jar = Paths.get(args[0]);
        Path tmp = jar.resolveSibling(jar.getFileName() + ".tmp");
        boolean removed = false;
        try (ZipInputStream in = new ZipInputStream(Files.newInputStream(jar));
             ZipOutputStream out = new ZipOutputStream(Files.newOutputStream(tmp))) {
            ZipEntry e;
            byte[] buf = new byte[65536];
            while ((e = in.getNextEntry()) != null) {
                if (e.getName().equals(VICTIM)) { removed = true; continue; }
                out.putNextEntry(new ZipEntry(e.getName()));
                int n;
                while ((n = in.read(buf)) > 0) out.write(buf, 0, n);
                out.closeEntry();
            }
        }
        Files.move(tmp, jar, StandardCopyOption.REPLACE_EXISTING);
        System.out.println(removed ? "removed " + VICTIM : "no JndiLookup.class present");
    }
}
